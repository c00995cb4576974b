"""Topologies and checks shared by the multi-process tests (worker processes, daemon processes)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from examples import wordcount
from squall.dsl import BoltRef, Topology
from support import wait_until
from topologies import Forward, Numbers, Recorder, read_records


def counted_word_count(records: Path, rounds: int, workers: int) -> tuple[Topology, Counter[str]]:
    """The example word count with a sink recording each (word, count), and the counts it must reach."""
    records.mkdir()
    expected = Counter(w for k in range(rounds * len(wordcount.SENTENCES))
                       for w in wordcount.SENTENCES[k % len(wordcount.SENTENCES)].split())
    t = wordcount.topology(rounds=rounds, workers=workers)
    t.bolt("sink", Recorder, args=[str(records)], parallelism=2).fields(BoltRef(t, "count"), "word")
    return t, expected


def final_counts(records: Path) -> Counter[str]:
    """The latest count of every word the sink saw."""
    latest: Counter[str] = Counter()
    for word, count in read_records(records, "seen"):
        latest[word] = max(latest[word], count)
    return latest


def reliable_stream(name: str, records: Path, count: int, workers: int = 2) -> Topology:
    """Numbers (reliable, replaying failed ids) → forward → sink, recording acks and what the sink saw."""
    records.mkdir()
    t = Topology(name, conf={"topology.workers": workers, "topology.max.spout.pending": 100,
                             "topology.message.timeout.secs": 3})
    forward = t.bolt("forward", Forward, parallelism=4).shuffle(
        t.spout("numbers", Numbers, args=[count], kwargs={"record_dir": str(records)}))
    t.bolt("sink", Recorder, args=[str(records)], parallelism=2).fields(forward, "key")
    return t


def nothing_lost(records: Path, count: int) -> None:
    """Every message of a :func:`reliable_stream` is acked at least once and reached the sink."""
    wait_until(lambda: set(read_records(records, "acked")) == set(range(count)), 120,
               "every message acked at least once")
    assert {n for _, n in read_records(records, "seen")} == set(range(count)), "the sink saw every message"
