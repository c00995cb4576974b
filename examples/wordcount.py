"""Word count, the hello world of Storm: sentences → split (shuffle) → count (fields on the word)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from squall.component import Bolt, Spout, TopologyContext
from squall.dsl import Topology
from squall.tuple import Tuple

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class Sentences(Spout):
    """Emits a fixed list of sentences ``rounds`` times, reliably: failed sentences are replayed."""

    outputs = ["sentence"]

    def __init__(self, rounds: int = 1) -> None:
        self.rounds = rounds

    def open(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        self.queue = [(n, s) for n in range(self.rounds) for s in range(len(SENTENCES))]
        self.in_flight: dict[str, int] = {}

    def next_tuple(self) -> None:
        if self.queue:
            n, s = self.queue.pop(0)
            msg_id = f"{n}-{s}"
            self.in_flight[msg_id] = s
            self.emit([SENTENCES[s]], msg_id=msg_id)

    def ack(self, msg_id: Any) -> None:
        self.in_flight.pop(msg_id, None)

    def fail(self, msg_id: Any) -> None:
        s = self.in_flight.pop(msg_id)
        n = int(msg_id.split("-")[0])
        self.queue.insert(0, (n, s))


class SplitSentence(Bolt):
    outputs = ["word"]

    def execute(self, tup: Tuple) -> None:
        for word in tup["sentence"].split():
            self.emit([word])


class WordCount(Bolt):
    """Running count per word; each update is emitted as (word, count)."""

    outputs = ["word", "count"]

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        self.counts: Counter[str] = Counter()

    def execute(self, tup: Tuple) -> None:
        word = tup["word"]
        self.counts[word] += 1
        self.emit([word, self.counts[word]])


def topology(rounds: int = 1, workers: int = 2) -> Topology:
    t = Topology("wordcount")
    sentences = t.spout("sentences", Sentences, rounds, parallelism=1)
    split = t.bolt("split", SplitSentence, parallelism=2).shuffle(sentences)
    t.bolt("count", WordCount, parallelism=2).fields(split, "word")
    return t.conf(**{"topology.workers": workers})
