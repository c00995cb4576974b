"""Word count, Storm's hello world: sentences → split (shuffle) → count (fields grouping on the word).

Deterministic, so its output can be checked exactly: the spout's tasks share out ``rounds`` passes
over :data:`SENTENCES` (message ``k`` is sentence ``k % len(SENTENCES)``, emitted by task
``k % tasks``), and a failed message is replayed before anything new. ``rounds=None`` runs forever;
``rate`` paces each spout task at that many sentences per second (steady rates for dashboards and for
checking metrics), else it emits as fast as the topology takes them.

    storm local examples/wordcount.py        # topology() is what the CLI builds
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator, Mapping
from itertools import count
from time import monotonic
from typing import Any

from squall import Bolt, Spout, Topology, TopologyContext, Tuple

SENTENCES = (
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
)


class SentenceSpout(Spout):
    """Reliable: each sentence carries its message number as msg id; failed ones are emitted again.
    With a ``rate``, a task that fell behind (paused, or inactive) catches up at most one second's worth."""

    outputs = ["sentence"]

    def __init__(self, rounds: int | None = None, rate: float | None = None) -> None:
        self.rounds = rounds
        self.rate = rate

    def open(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        first, step = context.task_index, len(context.tasks)
        self.fresh: Iterator[int] = (
            count(first, step) if self.rounds is None else iter(range(first, self.rounds * len(SENTENCES), step))
        )
        self.replays: deque[int] = deque()
        self.due = monotonic()  # when the next sentence is due, with a rate

    def next_tuple(self) -> None:
        if self.rate is not None:
            now = monotonic()
            if now < self.due:
                return
            self.due = max(self.due, now - 1.0) + 1.0 / self.rate
        msg_id = self.replays.popleft() if self.replays else next(self.fresh, None)
        if msg_id is not None:
            self.emit([SENTENCES[msg_id % len(SENTENCES)]], msg_id=msg_id)

    def fail(self, msg_id: int) -> None:
        self.replays.append(msg_id)


class SplitSentence(Bolt):
    """One tuple per word; auto_ack anchors each to its sentence and acks the sentence afterwards."""

    outputs = ["word"]

    def execute(self, tup: Tuple) -> None:
        for word in tup["sentence"].split():
            self.emit([word])


class WordCount(Bolt):
    """A running count per word, emitted as (word, count) on every update; ticks log the totals (and every
    count at DEBUG: `storm set_log_level wordcount -l wordcount=DEBUG` turns that on in a running topology)."""

    outputs = ["word", "count"]

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        self.counts: Counter[str] = Counter()
        # A user metric (Storm's metrics V2): read at each heartbeat, shown by the UI and its /metrics.
        context.register_gauge("distinct.words", lambda: len(self.counts))

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick:
            self.log.info(
                "word counts",
                words=len(self.counts),
                total=sum(self.counts.values()),
                top=dict(self.counts.most_common(3)),
            )
            self.log.debug("every count", counts=dict(self.counts))
            return
        word = tup["word"]
        self.counts[word] += 1
        self.emit([word, self.counts[word]])


def topology(
    rounds: int | None = None,
    workers: int = 2,
    spouts: int = 2,
    bolts: int = 4,
    name: str = "wordcount",
    rate: float | None = None,
) -> Topology:
    """The word count topology; ``rounds`` passes over the sentences (None: forever), ``rate`` sentences per
    second per spout task (None: as fast as they are taken)."""
    t = Topology(name, conf={"topology.workers": workers})
    sentences = t.spout("sentences", SentenceSpout, args=[rounds, rate], parallelism=spouts)
    split = t.bolt("split", SplitSentence, parallelism=bolts).shuffle(sentences)
    t.bolt("count", WordCount, parallelism=bolts, conf={"topology.tick.tuple.freq.secs": 5}).fields(split, "word")
    return t
