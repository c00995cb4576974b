"""Spark bolts: set-oriented stages (aggregations, joins, windows in Spark SQL) on micro-batches of tuples.

    class PageCounts(SparkBolt):
        outputs = ["page", "hits"]

        def transform(self, batch: DataFrame) -> DataFrame:
            return batch.groupBy("page").agg(F.count("*").alias("hits"))

A Spark bolt gathers its inputs into a batch, a worker's batch of rows at a time (``execute_batch``), which
closes when it holds the batch size (see below) or when its oldest input is ``spark.batch.interval.ms``
old, whichever comes first. The batch goes into Spark as an Arrow table (columns = the input stream's
fields, types inferred or given by ``input_types``); ``transform`` returns a DataFrame whose columns include
the output stream's fields, read back as an Arrow table. Its rows are emitted on ``output_stream``, each
anchored to every input of the batch, and then the inputs are acked together. If ``transform`` (or
reading its result) raises, nothing is emitted, the error goes to ``/taskerrors`` and every input of the
batch is failed, so reliable spouts replay them: at-least-once.

A job runs on a thread of its own (:class:`SparkJob`) while the bolt collects the next batch: at most
one job is in flight, and a full batch waits for it (then backpressure holds the spouts). The finished
job's emits, acks or fails happen on the bolt's task thread, at its next batch tick (every
``BATCH_CHECK_SECS``) or when a full batch waits for it (the collector is not thread-safe). The batch
size adapts to the measured job time (:func:`next_batch_size`): the tuples that arrive during one job,
so the next batch fills about as the running job ends, never more than ``spark.batch.size`` (plus the
rest of the worker batch that reached it).

Anchoring each output to the whole batch is Storm's multi-anchoring, done through one
:func:`~squall.api.tuple.stand_in` for the batch's inputs: every output row carries one edge per spout tree
the inputs belong to, not one per input, and the inputs are acked (or failed) as that one tuple, one ack
per tree (so the bolt's ``acked`` and ``failed`` stats count jobs). Fed by a spout whose batches are one
tree each (``emit_many(rows, msg_id=...)``), a 5,000-row job's output carries a few dozen roots. A failed
job then fails whole spout batches, rows that went into other jobs too: those are counted again on replay
(at-least-once).

The bolt has a task thread of its own (``component_conf``), so waiting for a job never holds up other
tasks of the worker. The session is shared by the worker's Spark tasks (:mod:`squall.api.sparksession`).
"""

from __future__ import annotations

import queue
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from squall.api import sparksession
from squall.api.component import Bolt, TopologyContext
from squall.api.tuple import Tuple, TupleBatch, stand_in
from squall.core.config.keys import default_config
from squall.core.system_ids import DEFAULT_STREAM

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["MicroBatch", "SparkBolt", "SparkJob", "next_batch_size", "output_rows", "to_arrow"]

#: How often a Spark bolt checks whether its batch is old enough to run (its tick tuple period).
BATCH_CHECK_SECS = 0.05


class MicroBatch:
    """Inputs waiting for the next job; ``add`` says when the batch is full, ``due`` when it is old enough.
    What :class:`SparkBolt` batches with; usable by any bolt that batches on size or age, a tuple or a worker's
    batch of rows at a time::

        batch = MicroBatch(size=500, interval_secs=1.0)
        if batch.add(tup, time.monotonic()) or batch.due(time.monotonic()):
            self.flush(batch.take())
        batch.add(rows, time.monotonic(), len(rows))     # a TupleBatch: its rows count

    ``size`` (in rows) may change between batches (a Spark bolt adapts it to its job time).
    """

    def __init__(self, size: int, interval_secs: float) -> None:
        self.size, self.interval = size, interval_secs
        self.inputs: list[Any] = []
        self.rows = 0
        self.opened = 0.0  # when the first of ``inputs`` came

    def add(self, item: Any, now: float, rows: int = 1) -> bool:
        """Add ``item`` of ``rows`` rows (``now`` opens the batch if it is the first); True when the batch is full."""
        if not self.inputs:
            self.opened = now
        self.inputs.append(item)
        self.rows += rows
        return self.rows >= self.size

    @property
    def full(self) -> bool:
        """Whether the batch holds ``size`` rows (or more, after ``size`` shrank)."""
        return self.rows >= self.size

    def due(self, now: float) -> bool:
        """Whether the batch has inputs and its oldest is ``interval_secs`` old."""
        return bool(self.inputs) and now - self.opened >= self.interval

    def take(self) -> list[Any]:
        """The batch's inputs, leaving it empty."""
        inputs, self.inputs, self.rows = self.inputs, [], 0
        return inputs


def next_batch_size(limit: int, current: int, job_secs: float, arrivals_per_sec: float) -> int:
    """The size of the batch after a job that took ``job_secs`` on a batch that was collected at
    ``arrivals_per_sec`` tuples a second: halfway from ``current`` to the tuples that arrive during one such
    job, within 1..``limit`` (``spark.batch.size``)::

        next_batch_size(10_000, 10_000, job_secs=0.5, arrivals_per_sec=4_000)   # 6_000: toward 2_000

    Why: with a job running while the next batch is collected, the batch that fills just as the job ends
    keeps both busy and adds no wait; a larger one waits for input (latency), a smaller one waits for the
    job (the bolt blocks). Job time grows with the batch, so the size settles where a job lasts as long as
    collecting its successor, or at ``limit`` when Spark cannot keep up (big batches amortise each job's
    fixed cost best). Halfway, so one slow job does not halve the next batch.
    """
    target = arrivals_per_sec * job_secs
    return max(1, min(limit, round((current + target) / 2)))


class SparkJob:
    """One batch through Spark: :meth:`run` (on the job thread) fills ``rows`` with its result, or ``error``
    with what it raised, and ``seconds`` with how long it took; :attr:`done` tells the task thread::

        job = SparkJob(inputs, arrivals_per_sec=2_000.0)
        threading.Thread(target=job.run, args=(bolt.run_job,)).start()
        job.wait()
        rows = job.rows if job.error is None else []
    """

    def __init__(self, inputs: list[Tuple | TupleBatch], arrivals_per_sec: float) -> None:
        self.inputs, self.arrivals_per_sec = inputs, arrivals_per_sec
        self.rows: list[tuple[Any, ...]] = []
        self.error: BaseException | None = None
        self.seconds = 0.0
        self._finished = threading.Event()

    def run(self, work: Callable[[list[Tuple | TupleBatch]], list[tuple[Any, ...]]]) -> None:
        """``work(inputs)``, recording its result or error and its time; then the job is done."""
        started = time.monotonic()
        try:
            self.rows = work(self.inputs)
        except BaseException as exc:  # anything: a job that ends without rows must fail its inputs, never ack them
            self.error = exc
        finally:
            self.seconds = time.monotonic() - started
            self._finished.set()

    @property
    def done(self) -> bool:
        """Whether the job has finished (its fields are then final)."""
        return self._finished.is_set()

    def wait(self) -> None:
        """Block until the job has finished."""
        self._finished.wait()


class SparkBolt(Bolt):
    """A bolt whose work is ``transform(batch DataFrame) -> DataFrame`` on micro-batches (see the module doc)::

        class PageCounts(SparkBolt):
            outputs = ["page", "hits"]
            input_types = {"bytes": "int64"}        # optional Arrow types for input fields

            def transform(self, batch):
                return batch.groupBy("page").agg(F.count("*").alias("hits"))

    Override :meth:`prepare_spark` to load reference tables once; if you override ``prepare`` or
    ``cleanup``, call ``super()``'s. Inputs are acked, or failed, together with their batch.
    ``transform`` runs on the job's thread: it must not emit, ack or fail (the bolt does, with its result).
    """

    auto_ack = False
    component_conf = MappingProxyType({"squall.own.thread": True, "topology.tick.tuple.freq.secs": BATCH_CHECK_SECS})
    needs_extra = "spark"
    #: Arrow type names by input field (``{"ts": "int64", "price": "double"}``); others are inferred.
    input_types: ClassVar[Mapping[str, str]] = MappingProxyType({})
    #: The declared stream the result rows go to.
    output_stream: ClassVar[str] = DEFAULT_STREAM

    spark: SparkSession

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        """Read the batch settings, join (or start) the worker's SparkSession, then :meth:`prepare_spark`."""
        conf = {**default_config(), **conf}  # a worker's conf has every key; a unit test's only what it sets
        self._limit = int(conf["spark.batch.size"])
        self._batch = MicroBatch(self._limit, int(conf["spark.batch.interval.ms"]) / 1000)
        self._job: SparkJob | None = None
        # One long-lived job thread: in classic mode every Python thread that calls Spark gets a py4j connection
        # and a JVM thread of its own (pinned threads), which a thread per job would churn. A daemon, so a job
        # still in Spark never keeps a stopping worker alive.
        self._jobs: queue.SimpleQueue[SparkJob | None] = queue.SimpleQueue()
        threading.Thread(target=self._run_jobs, name=f"spark-jobs-{context.task_id}", daemon=True).start()
        self._fields = tuple(self.streams[self.output_stream].fields) if self.output_stream in self.streams else ()
        if not self._fields:
            raise ValueError(
                f"{type(self).__qualname__} emits on {self.output_stream!r}, which its outputs do "
                "not declare (or declare with no fields)"
            )
        self.spark = sparksession.acquire(conf, f"squall-{context.topology_id}")
        self.prepare_spark(self.spark)

    def prepare_spark(self, spark: SparkSession) -> None:
        """Called once the session is up: register reference tables or temp views here."""

    @abstractmethod
    def transform(self, batch: DataFrame) -> DataFrame:
        """The batch's result; its columns must include the output stream's fields."""

    def execute(self, tup: Tuple) -> None:
        """A tick finishes a done job and starts the next batch's if it is full or due; an input (when a runtime
        delivers one at a time) joins the batch as :meth:`execute_batch` of one."""
        if not tup.is_tick:
            self.execute_batch(TupleBatch.of([tup]))
            return
        now, batch = time.monotonic(), self._batch
        if self._job is not None and self._job.done:
            self._finish()
        if self._job is None and (batch.full or batch.due(now)):
            self._start(now)

    def execute_batch(self, batch: TupleBatch) -> None:
        """Add the worker's batch of inputs to the micro-batch, and start its job once full."""
        now, held = time.monotonic(), self._batch
        if held.inputs and batch.fields != held.inputs[0].fields:
            self._start(now)  # one schema per batch: a stream with other fields starts a new one
        if held.add(batch, now, len(batch)):
            self._start(now)

    def run_job(self, inputs: list[Tuple | TupleBatch]) -> list[tuple[Any, ...]]:
        """One job's work, on its thread: the inputs into Spark as Arrow, ``transform``, the rows out by Arrow."""
        frame = self.spark.createDataFrame(to_arrow(inputs, self.input_types))
        return output_rows(self.transform(frame).toArrow(), self._fields)

    def _run_jobs(self) -> None:
        while (job := self._jobs.get()) is not None:
            job.run(self.run_job)

    def _start(self, now: float) -> None:
        """The batch's job, once the one in flight (if any) has finished and been emitted or failed."""
        if self._job is not None:
            self._job.wait()
            self._finish()
        batch = self._batch
        arrivals = batch.rows / max(now - batch.opened, 1e-3)
        self._job = SparkJob(batch.take(), arrivals)
        self._jobs.put(self._job)

    def _finish(self) -> None:
        """On the task thread: the finished job's rows emitted and its inputs acked, or its inputs failed."""
        job, self._job = self._job, None
        assert job is not None
        self._batch.size = next_batch_size(self._limit, self._batch.size, job.seconds, job.arrivals_per_sec)
        inputs = stand_in(job.inputs)
        if job.error is not None:
            self.report_error(job.error)
            self.fail(inputs)
            return
        self.emit_batch(job.rows, self.output_stream, anchors=(inputs,))
        self.ack(inputs)

    def cleanup(self) -> None:
        """Fail what is in flight or batched (replayed now, not after the timeout) and release the session."""
        if self._job is not None:
            self.fail(stand_in(self._job.inputs))
            self._job = None
        if held := self._batch.take():
            self.fail(stand_in(held))
        self._jobs.put(None)  # the job thread ends after the job in flight, if any
        sparksession.release()


def to_arrow(inputs: Sequence[Tuple | TupleBatch], types: Mapping[str, str] = MappingProxyType({})) -> pyarrow.Table:
    """The batch as an Arrow table, one column per field of its inputs (tuples, or a worker's batches of rows,
    all of one set of fields)."""
    import pyarrow as pa

    fields = inputs[0].fields
    rows = [row for item in inputs for row in (item.rows if isinstance(item, TupleBatch) else (item.values,))]
    columns = {}
    for name, values in zip(fields, zip(*rows)):
        try:
            columns[name] = pa.array(values, type=pa.type_for_alias(types[name]) if name in types else None)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise TypeError(
                f"input field {name!r} cannot be a Spark column: {exc} (set input_types "
                f"{{{name!r}: 'string'}} or similar on the bolt to say its type)"
            ) from None
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
        return (
            t.is_integer(kind)
            or t.is_floating(kind)
            or t.is_boolean(kind)
            or t.is_null(kind)
            or t.is_string(kind)
            or t.is_large_string(kind)
            or t.is_binary(kind)
        )

    for name in fields:
        kind = table.schema.field(name).type
        if not plain(kind):
            raise TypeError(
                f"output column {name!r} has Spark/Arrow type {kind}, which a tuple cannot carry: "
                "cast it in transform() (timestamps to long or string, decimals to double)"
            )
    columns = [table.column(name).to_pylist() for name in fields]
    return list(zip(*columns))
