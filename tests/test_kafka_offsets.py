"""The Kafka spout's pure decisions: what may be committed (the highest contiguous done offset), the retry
schedule (Storm's exponential backoff, on a simulated clock), where a partition starts, which partitions a task
reads, and the options it refuses."""

from __future__ import annotations

import pytest

from squall.api.kafka.offsets import PartitionOffsets, RetryPolicy
from squall.api.kafka.options import (
    BEGINNING,
    END,
    FirstPollOffsetStrategy as Strategy,
    KafkaConfigError,
    ProcessingGuarantee,
    SpoutOptions,
    commit_metadata,
    committed_by,
    round_robin,
    start_offset,
)
from squall.core.clock import SimulatedClock


def read(offsets: PartitionOffsets, *polled: int, now: float = 0.0) -> list[int]:
    """The offsets of ``polled`` that the spout emits."""
    return [offset for offset in polled if offsets.polled(offset, now)]


def test_the_commit_is_the_lowest_offset_not_done() -> None:
    offsets = PartitionOffsets(10, RetryPolicy(), committed=10)
    assert read(offsets, 10, 11, 12, 13) == [10, 11, 12, 13]
    assert offsets.committable() is None  # nothing done: the commit stays at 10
    offsets.done(11)
    offsets.done(13)
    assert offsets.committable() is None  # 10 is still in flight
    offsets.done(10)
    assert offsets.committable() == 12
    offsets.commit(12)
    assert offsets.committable() is None
    offsets.done(12)
    assert offsets.committable() == 14  # everything read is done: the next to read


def test_offsets_the_broker_never_delivered_hold_nothing_up() -> None:
    offsets = PartitionOffsets(None, RetryPolicy())
    assert offsets.committable() is None  # nothing read yet, start unknown
    assert read(offsets, 5, 6, 9, 12) == [5, 6, 9, 12]  # 7, 8, 10, 11: compacted away, or transaction markers
    for offset in (5, 6, 9):
        offsets.done(offset)
    assert offsets.committable() == 12
    offsets.done(12)
    assert offsets.committable() == 13


def test_storm_s_backoff_defaults() -> None:
    policy = RetryPolicy()
    assert (policy.initial_delay_secs, policy.delay_period_secs, policy.max_delay_secs, policy.max_retries) == (
        0.0, 0.002, 10.0, None)  # fmt: skip
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [0.0, 0.004, 0.008, 0.016]
    assert policy.delay(30) == 10.0  # capped
    assert policy.delay(10_000) == 10.0  # no overflow however often it failed
    assert not policy.gives_up(10**9)


def test_a_failed_offset_is_read_again_after_its_backoff() -> None:
    clock = SimulatedClock()
    offsets = PartitionOffsets(0, RetryPolicy(initial_delay_secs=1.0, delay_period_secs=2.0, max_delay_secs=60.0))
    assert read(offsets, 0, 1, 2, 3, now=clock.monotonic()) == [0, 1, 2, 3]
    offsets.done(0)
    offsets.done(2)
    assert offsets.failed(1, clock.monotonic())
    assert offsets.committable() == 1  # a waiting retry holds the commit
    assert offsets.seek(clock.monotonic()) is None  # not due yet
    clock.advance(1.0)
    assert offsets.seek(clock.monotonic()) == 1  # read again from 1
    assert read(offsets, 1, 2, 3, now=clock.monotonic()) == [1]  # 2 is done, 3 in flight: only the retry
    assert offsets.failed(1, clock.monotonic())  # second failure: 2 s * 2
    clock.advance(3.9)
    assert offsets.seek(clock.monotonic()) is None
    clock.advance(0.1)
    assert offsets.seek(clock.monotonic()) == 1
    assert read(offsets, 1, 2, 3, 4, now=clock.monotonic()) == [1, 4]  # the retry, then new records
    offsets.done(1)
    offsets.done(3)
    offsets.done(4)
    assert offsets.committable() == 5


def test_a_retry_not_yet_due_is_skipped_when_an_earlier_one_is_read_again() -> None:
    offsets = PartitionOffsets(0, RetryPolicy(initial_delay_secs=1.0, delay_period_secs=5.0))
    read(offsets, 0, 1, 2)
    offsets.failed(0, 0.0)
    offsets.failed(1, 0.0)
    assert offsets.failed(0, 0.0) is False  # a late second fail of an offset already waiting changes nothing
    assert offsets.seek(1.0) == 0
    assert read(offsets, 0, 1, 2, now=1.0) == [0, 1]
    assert offsets.failed(1, 1.0)  # due at 1 + 10
    assert read(offsets, 1, now=2.0) == []  # re-read too early: skipped, still waiting
    assert offsets.seek(11.0) == 1


def test_an_offset_is_given_up_after_max_retries_and_committed_as_done() -> None:
    offsets = PartitionOffsets(0, RetryPolicy(max_retries=1))
    read(offsets, 0, 1)
    offsets.done(1)
    assert offsets.failed(0, 0.0)  # the one retry
    assert offsets.seek(0.0) == 0 and read(offsets, 0, 1) == [0]
    assert offsets.failed(0, 0.0) is False  # given up
    assert offsets.committable() == 2


def test_a_partition_read_max_uncommitted_offsets_past_its_commit_is_full_until_commits_catch_up() -> None:
    offsets = PartitionOffsets(None, RetryPolicy())
    assert not offsets.full(3)  # nothing read
    read(offsets, 100, 101)
    assert not offsets.full(3)
    read(offsets, 102)
    assert offsets.full(3)  # counted from where reading started, before any commit
    offsets.done(100)
    offsets.commit(offsets.committable() or 0)
    assert not offsets.full(3)  # the commit moved to 101
    resumed = PartitionOffsets(50, RetryPolicy(), committed=50)
    read(resumed, 50, 51)
    assert resumed.full(2) and not resumed.full(3)


def test_a_batch_rewound_is_read_again_as_new() -> None:
    offsets = PartitionOffsets(0, RetryPolicy(), committed=0)
    for offset in read(offsets, 0, 1, 2):  # at most once: done as soon as read
        offsets.done(offset)
    offsets.rewind(0)  # its commit failed: not emitted
    assert offsets.committable() is None
    assert read(offsets, 0, 1, 2) == [0, 1, 2]


def test_a_retry_is_due_once_its_backoff_passed() -> None:
    offsets = PartitionOffsets(0, RetryPolicy(initial_delay_secs=1.0))
    read(offsets, 0)
    assert not offsets.due(0.0)
    offsets.failed(0, 0.0)
    assert not offsets.due(0.9) and offsets.due(1.0)


def test_where_a_partition_starts() -> None:
    for strategy in Strategy:  # a commit this topology wrote is always resumed from
        assert start_offset(strategy, 42, by_this_topology=True) == 42
    assert start_offset(Strategy.EARLIEST, 42, by_this_topology=False) == BEGINNING
    assert start_offset(Strategy.LATEST, 42, by_this_topology=False) == END
    assert start_offset(Strategy.UNCOMMITTED_EARLIEST, 42, by_this_topology=False) == 42
    assert start_offset(Strategy.UNCOMMITTED_LATEST, 42, by_this_topology=False) == 42
    assert start_offset(Strategy.UNCOMMITTED_EARLIEST, None, by_this_topology=False) == BEGINNING
    assert start_offset(Strategy.UNCOMMITTED_LATEST, None, by_this_topology=False) == END


def test_commit_metadata_names_the_topology_and_task() -> None:
    metadata = commit_metadata("reader-1-1700000000", 7, "spout kafka")
    assert committed_by(metadata) == "reader-1-1700000000"
    assert committed_by(None) is None
    assert committed_by("written by another client") is None
    assert committed_by("[1]") is None


def test_partitions_go_to_tasks_round_robin() -> None:
    partitions = [("b", 0), ("a", 1), ("a", 0), ("b", 1), ("a", 2)]
    assert [round_robin(partitions, i, 2) for i in range(2)] == [
        [("a", 0), ("a", 2), ("b", 1)],
        [("a", 1), ("b", 0)],
    ]
    assert [round_robin(partitions, i, 3) for i in range(3)] == [
        [("a", 0), ("b", 0)],
        [("a", 1), ("b", 1)],
        [("a", 2)],
    ]


def options(**changes: object) -> SpoutOptions:
    arguments: dict[str, object] = {
        "bootstrap_servers": "localhost:9092",
        "topics": ["events"],
        "props": {"group.id": "readers"},
        "first_poll_offset_strategy": "UNCOMMITTED_EARLIEST",
        "processing_guarantee": "AT_LEAST_ONCE",
        "offset_commit_period_ms": 30_000,
        "partition_refresh_period_ms": 2_000,
        "max_uncommitted_offsets": 10_000_000,
        "retry": None,
        **changes,
    }
    return SpoutOptions.of(**arguments)  # type: ignore[arg-type]


def test_options_in_storm_s_names_and_defaults() -> None:
    checked = options(props={"group.id": "readers", "fetch.min.bytes": 1000}, topics="events",
                      retry={"delay_period_ms": 5, "max_retries": 3})
    assert checked.topics == ("events",)
    assert checked.consumer == {"auto.offset.reset": "earliest", "group.id": "readers", "fetch.min.bytes": 1000,
                                "bootstrap.servers": "localhost:9092", "enable.auto.commit": False,
                                "enable.auto.offset.store": False}
    assert (checked.commit_period_secs, checked.refresh_period_secs, checked.max_uncommitted) == (30.0, 2.0, 10**7)
    assert checked.retry == RetryPolicy(delay_period_secs=0.005, max_retries=3)
    assert checked.first_poll is Strategy.UNCOMMITTED_EARLIEST
    assert checked.guarantee is ProcessingGuarantee.AT_LEAST_ONCE
    for guarantee in ("AT_MOST_ONCE", "NO_GUARANTEE"):  # Storm's default reset without tracking: the end
        assert options(processing_guarantee=guarantee).consumer["auto.offset.reset"] == "latest"
    assert options(props={"group.id": "g", "auto.offset.reset": "earliest"},
                   processing_guarantee="NO_GUARANTEE").consumer["auto.offset.reset"] == "earliest"


@pytest.mark.parametrize(("changes", "told"), [
    ({"props": {"group.id": "g", "enable.auto.commit": True}}, "enable.auto.commit is not allowed"),
    ({"props": {}}, "needs a consumer group for its commits: set props['group.id']"),
    ({"topics": []}, "topics must be a topic name or a list of them"),
    ({"first_poll_offset_strategy": "NEWEST"}, "first_poll_offset_strategy must be one of EARLIEST, LATEST"),
    ({"processing_guarantee": "EXACTLY_ONCE"}, "processing_guarantee must be one of AT_LEAST_ONCE, AT_MOST_ONCE"),
    ({"offset_commit_period_ms": 0}, "offset_commit_period_ms must be a positive number"),
    ({"retry": {"max_delay": 5}}, "unknown retry option 'max_delay'"),
    ({"max_uncommitted_offsets": 0}, "max_uncommitted_offsets must be a positive integer"),
])  # fmt: skip
def test_options_that_cannot_work_are_refused_in_one_line(changes: dict[str, object], told: str) -> None:
    with pytest.raises(KafkaConfigError) as raised:
        options(**changes)
    assert told in str(raised.value)
    assert "\n" not in str(raised.value)
