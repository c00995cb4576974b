"""Topologies and checks shared by the multi-process tests (worker processes, daemon processes)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from examples import wordcount
from squall.api.dsl import BoltRef, Topology
from squall.core.package import build_package
from support import wait_until
from topologies import Forward, Numbers, Recorder, Tag, read_records

REPO = Path(__file__).resolve().parent.parent


def expected_word_counts(rounds: int) -> Counter[str]:
    """The counts the example word count's spout (``rounds`` sentences a round) must end at."""
    return Counter(w for k in range(rounds * len(wordcount.SENTENCES))
                   for w in wordcount.SENTENCES[k % len(wordcount.SENTENCES)].split())


def word_counts(running: Any) -> Counter[str]:
    """What the ``count`` bolts of a running local topology have counted so far, all tasks together."""
    total: Counter[str] = Counter()
    for executor in running.tasks("count"):
        total.update(dict(executor.bolt.counts))
    return total


def counted_word_count(records: Path, rounds: int, workers: int) -> tuple[Topology, Counter[str]]:
    """The example word count with a sink recording each (word, count), and the counts it must reach."""
    records.mkdir()
    expected = expected_word_counts(rounds)
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


def release_package(tmp: Path, release: str) -> Path:
    """The tests' topologies plus a ``release`` module (read by :class:`~topologies.Tag`): ``VERSION = release``,
    or, for a release named ``crash…``, an import that fails, as a version that cannot start."""
    source = tmp / release / "release.py"
    source.parent.mkdir(parents=True)
    crash = release.startswith("crash")
    source.write_text("raise RuntimeError('this release cannot start')\n" if crash else f"VERSION = {release!r}\n")
    return build_package([REPO / "tests" / "topologies.py", source], tmp / f"{release}.zip")


def tagged_stream(name: str, records: Path, workers: int, pending: int, tags: int) -> Topology:
    """A reliable spout → ``tags`` Tag tasks (each stamps its code's release) → one recording sink."""
    t = Topology(name, {"topology.workers": workers, "topology.max.spout.pending": pending})
    numbers = t.spout("numbers", Numbers, args=[10_000_000, 8], kwargs={"record_dir": str(records)})
    tag = t.bolt("tag", Tag, parallelism=tags).shuffle(numbers)
    t.bolt("sink", Recorder, args=[str(records)]).shuffle(tag)
    return t
