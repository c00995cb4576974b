"""Spark bolts: set-oriented stages (aggregations, joins, windows in Spark SQL) on micro-batches of tuples.

    class PageCounts(SparkBolt):
        outputs = ["page", "hits"]

        def transform(self, batch: DataFrame) -> DataFrame:
            return batch.groupBy("page").agg(F.count("*").alias("hits"))

A Spark bolt gathers its inputs into a batch, which closes at ``spark.batch.size`` tuples or when its
oldest tuple is ``spark.batch.interval.ms`` old, whichever comes first. The batch goes into Spark as an
Arrow table (columns = the input stream's fields, types inferred or given by ``input_types``);
``transform`` returns a DataFrame whose columns include the output stream's fields. Its rows are
emitted on ``output_stream``, each anchored to every input of the batch, and then the inputs are acked
together. If ``transform`` (or reading its result) raises, nothing is emitted, the error goes to
``/taskerrors`` and every input of the batch is failed, so reliable spouts replay them: at-least-once.

Anchoring each output to the whole batch is Storm's multi-anchoring: every output row carries the
batch's spout roots, and its ack reaches the ackers for each of them. :meth:`~squall.component.Bolt.
emit_batch` and bulk acks keep that work in C, but it still grows with rows x batch: Spark bolts that
aggregate emit few rows per batch, which is what they are for; keep per-tuple work in plain bolts.

Jobs run on the bolt's task thread (``component_conf`` gives it its own), so a job never holds up
other tasks of the worker; while a job runs, new input waits in the receive queue and backpressure
holds the spouts. The session is shared by the worker's Spark tasks (:mod:`squall.sparksession`).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from squall import sparksession
from squall.component import Bolt, TopologyContext
from squall.config import default_config
from squall.tuple import DEFAULT_STREAM, Tuple

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["MicroBatch", "SparkBolt", "output_rows", "to_arrow"]

#: How often a Spark bolt checks whether its batch is old enough to run (its tick tuple period).
BATCH_CHECK_SECS = 0.05


class MicroBatch:
    """Inputs waiting for the next job; ``add`` says when the batch is full, ``due`` when it is old enough.
    What :class:`SparkBolt` batches with; usable by any bolt that batches on size or age::

        batch = MicroBatch(size=500, interval_secs=1.0)
        if batch.add(tup, time.monotonic()) or batch.due(time.monotonic()):
            self.flush(batch.take())
    """

    def __init__(self, size: int, interval_secs: float) -> None:
        self.size, self.interval = size, interval_secs
        self.tuples: list[Tuple] = []
        self._opened = 0.0

    def add(self, tup: Tuple, now: float) -> bool:
        """Add ``tup`` (``now`` opens the batch if it is the first); True when the batch is full."""
        if not self.tuples:
            self._opened = now
        self.tuples.append(tup)
        return len(self.tuples) >= self.size

    def due(self, now: float) -> bool:
        """Whether the batch has tuples and its oldest is ``interval_secs`` old."""
        return bool(self.tuples) and now - self._opened >= self.interval

    def take(self) -> list[Tuple]:
        """The batch's tuples, leaving it empty."""
        tuples, self.tuples = self.tuples, []
        return tuples


class SparkBolt(Bolt):
    """A bolt whose work is ``transform(batch DataFrame) -> DataFrame`` on micro-batches (see the module doc)::

        class PageCounts(SparkBolt):
            outputs = ["page", "hits"]
            input_types = {"bytes": "int64"}        # optional Arrow types for input fields

            def transform(self, batch):
                return batch.groupBy("page").agg(F.count("*").alias("hits"))

    Override :meth:`prepare_spark` to load reference tables once; if you override ``prepare`` or
    ``cleanup``, call ``super()``'s. Inputs are acked, or failed, together with their batch.
    """

    auto_ack = False
    component_conf = MappingProxyType({"squall.own.thread": True, "topology.tick.tuple.freq.secs": BATCH_CHECK_SECS})
    #: Arrow type names by input field (``{"ts": "int64", "price": "double"}``); others are inferred.
    input_types: ClassVar[Mapping[str, str]] = MappingProxyType({})
    #: The declared stream the result rows go to.
    output_stream: ClassVar[str] = DEFAULT_STREAM

    spark: SparkSession

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        """Read the batch settings, join (or start) the worker's SparkSession, then :meth:`prepare_spark`."""
        conf = {**default_config(), **conf}  # a worker's conf has every key; a unit test's only what it sets
        self._batch = MicroBatch(int(conf["spark.batch.size"]), int(conf["spark.batch.interval.ms"]) / 1000)
        self._fields = tuple(self.streams[self.output_stream].fields) if self.output_stream in self.streams else ()
        if not self._fields:
            raise ValueError(f"{type(self).__qualname__} emits on {self.output_stream!r}, which its outputs do "
                             "not declare (or declare with no fields)")
        self.spark = sparksession.acquire(conf, f"squall-{context.topology_id}")
        self.prepare_spark(self.spark)

    def prepare_spark(self, spark: SparkSession) -> None:
        """Called once the session is up: register reference tables or temp views here."""

    @abstractmethod
    def transform(self, batch: DataFrame) -> DataFrame:
        """The batch's result; its columns must include the output stream's fields."""

    def execute(self, tup: Tuple) -> None:
        """Add ``tup`` to the batch and run it once full; ticks run a batch that is old enough."""
        now = time.monotonic()
        if tup.is_tick:
            if self._batch.due(now):
                self.run_batch(self._batch.take())
            return
        if self._batch.tuples and tup.fields != self._batch.tuples[0].fields:
            self.run_batch(self._batch.take())  # one schema per batch: a stream with other fields starts a new one
        if self._batch.add(tup, now):
            self.run_batch(self._batch.take())

    def run_batch(self, inputs: list[Tuple]) -> None:
        """One job: the inputs through ``transform``; emit and ack all, or fail all."""
        try:
            frame = self.spark.createDataFrame(to_arrow(inputs, self.input_types))
            rows = output_rows(self.transform(frame).toArrow(), self._fields)
        except Exception as exc:
            self.report_error(exc)
            for tup in inputs:
                self.fail(tup)
            return
        self.emit_batch(rows, self.output_stream, anchors=inputs)
        for tup in inputs:
            self.ack(tup)

    def cleanup(self) -> None:
        """Fail what is still batched (replayed now, not after the timeout) and release the session."""
        for tup in self._batch.take():
            self.fail(tup)  # replayed now rather than after the message timeout
        sparksession.release()


def to_arrow(inputs: Sequence[Tuple], types: Mapping[str, str] = MappingProxyType({})) -> pyarrow.Table:
    """The batch as an Arrow table, one column per field of its tuples (all share one set of fields)."""
    import pyarrow as pa

    fields = inputs[0].fields
    columns = {}
    for i, name in enumerate(fields):
        values = [tup.values[i] for tup in inputs]
        try:
            columns[name] = pa.array(values, type=pa.type_for_alias(types[name]) if name in types else None)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise TypeError(f"input field {name!r} cannot be a Spark column: {exc} (set input_types "
                            f"{{{name!r}: 'string'}} or similar on the bolt to say its type)") from None
    return pa.table(columns)


def output_rows(table: pyarrow.Table, fields: Sequence[str]) -> list[tuple[Any, ...]]:
    """The result's rows as tuple values in ``fields`` order, once every column can travel as a tuple value."""
    import pyarrow as pa
    import pyarrow.types as t

    missing = [name for name in fields if name not in table.column_names]
    if missing:
        raise ValueError(f"transform() returned columns {table.column_names}, missing the output fields {missing}")

    def plain(kind: pa.DataType) -> bool:
        if t.is_list(kind) or t.is_large_list(kind):
            return plain(kind.value_type)
        if t.is_struct(kind):
            return all(plain(kind.field(i).type) for i in range(kind.num_fields))
        if t.is_map(kind):
            return plain(kind.key_type) and plain(kind.item_type)
        return (t.is_integer(kind) or t.is_floating(kind) or t.is_boolean(kind) or t.is_null(kind)
                or t.is_string(kind) or t.is_large_string(kind) or t.is_binary(kind))

    for name in fields:
        kind = table.schema.field(name).type
        if not plain(kind):
            raise TypeError(f"output column {name!r} has Spark/Arrow type {kind}, which a tuple cannot carry: "
                            "cast it in transform() (timestamps to long or string, decimals to double)")
    columns = [table.column(name).to_pylist() for name in fields]
    return list(zip(*columns))
