"""storm-perf's benchmark components (``examples/storm-perf`` in Apache Storm), for ``bench/``.

``ConstSpout`` emits the constant "some data", reliably (message id = a counter) as Storm's does;
``IdBolt`` re-emits its input; ``DevNullBolt`` drops it. The ``Batch*`` classes do the same through the
batch API (``next_batch``/``emit_many``, ``execute_batch``/``emit_each``): ``const_null(api="batch")``.
"""

from __future__ import annotations

import time
from itertools import islice
from typing import Any

from examples import wordcount
from squall import Bolt, Spout, Topology, Tuple, TupleBatch


class ConstSpout(Spout):
    """``rate`` (tuples/s for the whole component, shared by its tasks) holds it below saturation.

    Paced, it reads the clock once per burst, not per tuple: when it has used up what was due at its last look,
    it looks again, and emits nothing while ahead (the executor then backs off a millisecond). So a paced run
    costs per tuple what a saturated one does, and the CPU a worker uses below capacity is the runtime's."""

    outputs = ["str"]

    def __init__(self, value: str = "some data", rate: float | None = None) -> None:
        self.value = [value]
        self.msg_id = 0
        self.rate = rate
        self.due = 0.0  # msg ids due at the last look at the clock

    def open(self, conf: Any, context: Any) -> None:
        if self.rate:
            self.per_sec = self.rate / len(context.tasks)
            self.start = time.monotonic()

    def next_tuple(self) -> None:
        if self.rate and self.msg_id >= self.due:
            self.due = (time.monotonic() - self.start) * self.per_sec
            if self.msg_id >= self.due:
                return  # ahead of the rate: emit nothing
        self.msg_id += 1
        self.emit(self.value, msg_id=self.msg_id)


class IdBolt(Bolt):
    outputs = ["str"]

    def execute(self, tup: Tuple) -> None:
        self.emit(tup.values)


class DevNullBolt(Bolt):
    def execute(self, tup: Tuple) -> None:
        pass


def const_null(
    *,
    grouping: str = "local_or_shuffle",
    ackers: int = 0,
    workers: int = 1,
    spouts: int = 1,
    bolts: int = 1,
    id_bolt: bool = False,
    rate: float | None = None,
    conf: dict[str, Any] | None = None,
    api: str = "tuple",
) -> Topology:
    """ConstSpoutNullBoltTopo (or ConstSpoutIdBoltNullBoltTopo with ``id_bolt``); ``api="batch"`` uses the
    batch-API components."""
    batch = api == "batch"
    t = Topology("const-null", conf={"topology.workers": workers, "topology.acker.executors": ackers, **(conf or {})})
    source = t.spout(
        "spout", BatchConstSpout if batch else ConstSpout, kwargs={"rate": rate} if rate else None, parallelism=spouts
    )
    if id_bolt:
        source = getattr(t.bolt("id", BatchIdBolt if batch else IdBolt, parallelism=bolts), grouping)(source)
    getattr(t.bolt("null", BatchDevNullBolt if batch else DevNullBolt, parallelism=bolts), grouping)(source)
    return t


class BatchConstSpout(Spout):
    """``ConstSpout`` with the batch API: ``next_batch`` emits ``max_rows`` copies in one ``emit_many``, reliable
    when the topology has ackers (each batch one tree, its msg id a counter, as a Trident batch), as Bytewax's
    batched source is compared unreliable. With a ``rate`` (tuples/s for the component) it emits what is due,
    at most ``max_rows``, and nothing while ahead."""

    outputs = ["str"]

    def __init__(self, value: str = "some data", rate: float | None = None) -> None:
        self.row = (value,)
        self.msg_id = self.rows = 0
        self.rate = rate

    def open(self, conf: Any, context: Any) -> None:
        self.reliable = bool(conf.get("topology.acker.executors"))
        if self.rate:
            self.per_sec = self.rate / len(context.tasks)
            self.start = time.monotonic()

    def next_tuple(self) -> None:
        self.next_batch(1)

    def next_batch(self, max_rows: int) -> None:
        if self.rate:
            max_rows = min(max_rows, int((time.monotonic() - self.start) * self.per_sec) - self.rows)
            if max_rows <= 0:
                return  # ahead of the rate
        self.rows += max_rows
        self.msg_id += 1
        self.emit_many([self.row] * max_rows, msg_id=self.msg_id if self.reliable else None)


class BatchIdBolt(Bolt):
    """``IdBolt`` with the batch API: every input re-emitted, anchored to itself."""

    outputs = ["str"]

    def execute(self, tup: Tuple) -> None:
        self.emit(tup.values)

    def execute_batch(self, batch: TupleBatch) -> None:
        self.emit_each(batch.values, inputs=batch)


class BatchDevNullBolt(Bolt):
    """``DevNullBolt`` with the batch API: one call per batch."""

    def execute(self, tup: Tuple) -> None:
        pass

    def execute_batch(self, batch: TupleBatch) -> None:
        pass


class BatchSentenceSpout(wordcount.SentenceSpout):
    """``SentenceSpout`` with the batch API: ``next_batch`` emits up to ``max_rows`` sentences in one call, as one
    tree (its msg id: the sentences' numbers, all replayed if it fails)."""

    def next_batch(self, max_rows: int) -> None:
        ids = [self.replays.popleft() for _ in range(min(max_rows, len(self.replays)))]
        ids += islice(self.fresh, max_rows - len(ids))
        if ids:
            sentences = wordcount.SENTENCES
            self.emit_many([(sentences[i % len(sentences)],) for i in ids], msg_id=tuple(ids))

    def fail(self, msg_id: tuple[int, ...]) -> None:  # type: ignore[override]  # its trees' ids: only batches
        self.replays.extend(msg_id)


class BatchSplitSentence(wordcount.SplitSentence):
    """``SplitSentence`` with the batch API: each word anchored to its own sentence (``emit_each``)."""

    def execute_batch(self, batch: TupleBatch) -> None:
        words, index = [], []
        for i, (sentence,) in enumerate(batch.values):
            for word in sentence.split():
                words.append((word,))
                index.append(i)
        self.emit_each(words, inputs=batch, index=index)


class BatchWordCount(wordcount.WordCount):
    """``WordCount`` with the batch API: counts a batch of words, emits (word, count) per update."""

    def execute_batch(self, batch: TupleBatch) -> None:
        counts, out = self.counts, []
        for (word,) in batch.values:
            counts[word] += 1
            out.append((word, counts[word]))
        self.emit_each(out, inputs=batch)


def wordcount_topology(*, api: str = "tuple", workers: int = 1, spouts: int = 1, bolts: int = 1) -> Topology:
    """``examples.wordcount.topology`` running forever, with the batch-API components when ``api="batch"``."""
    if api != "batch":
        return wordcount.topology(rounds=None, workers=workers, spouts=spouts, bolts=bolts)
    t = Topology("wordcount", conf={"topology.workers": workers})
    sentences = t.spout("sentences", BatchSentenceSpout, args=[None], parallelism=spouts)
    split = t.bolt("split", BatchSplitSentence, parallelism=bolts).shuffle(sentences)
    t.bolt("count", BatchWordCount, parallelism=bolts, conf={"topology.tick.tuple.freq.secs": 5}).fields(split, "word")
    return t
