"""The Kafka spout against a real broker (the session's, tests/conftest.py): every record reaches the topology,
commits follow the acks to the end of each partition, a restarted topology resumes from its commits, the
first-poll strategies, retries with backoff, pausing at max_uncommitted_offsets, the untracked guarantees; the
rule about a commit this topology wrote, on librdkafka's mock cluster."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from squall.api.component import Bolt
from squall.api.dsl import Topology
from squall.api.kafka.options import KafkaConfigError
from squall.api.kafka.spout import KafkaSpout
from squall.api.testing import SpoutRun, make_context, run_spout
from squall.api.tuple import Tuple
from squall.core.extras import EXTRAS, MissingExtra
from squall.dev.local import LocalTopology
from support import blocks_run_by, wait_until
from topologies import Recorder

PARTITIONS = 3
FAST = {"topology.message.timeout.secs": 30}  # no tree times out while a slow start-up delays the first acks


def new_topic(address: str) -> str:
    name = f"events-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": address})  # kept until the futures are done: they need its handle
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(30)
    return name


def produce(address: str, topic: str, values: range, *, batch_per_record: bool = False) -> None:
    """Records ``value i`` keyed ``i`` into partition i % 3; one record per batch on request (the broker's end
    offsets are only right then: docs of squall.dev.kafka)."""
    producer = Producer({"bootstrap.servers": address, "linger.ms": 0})
    for i in values:
        producer.produce(topic, key=str(i).encode(), value=f"value {i}".encode(), partition=i % PARTITIONS)
        if batch_per_record:
            producer.flush(30)
    assert producer.flush(30) == 0


def committed(address: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": address, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def ends(values: range) -> dict[int, int]:
    """Each partition's offset after its last record, for records ``values`` produced into an empty topic."""
    counts = Counter(i % PARTITIONS for i in values)
    return {p: counts[p] for p in range(PARTITIONS)}


def kafka_topology(name: str, address: str, topic: str, group: str, sink: type[Bolt] = Recorder,
                   **options: Any) -> Topology:
    topology = Topology(name)
    props = {"group.id": group, "fetch.wait.max.ms": 50}  # a seek for a retry waits for the fetch in flight
    spout = topology.spout("kafka", KafkaSpout, args=[address, [topic], props],
                           kwargs={"offset_commit_period_ms": 100, "partition_refresh_period_ms": 200, **options},
                           parallelism=2)
    topology.bolt("sink", sink).shuffle(spout)
    return topology


def seen(local: LocalTopology) -> list[tuple[Any, ...]]:
    return [values for _, _, values in local.component("sink").seen]


def test_every_record_reaches_the_topology_and_commits_reach_the_end(kafka_address: str) -> None:
    topic, group = new_topic(kafka_address), f"group-{uuid.uuid4().hex[:8]}"
    produce(kafka_address, topic, range(300))
    with LocalTopology(kafka_topology("reader", kafka_address, topic, group), FAST) as local:
        wait_until(lambda: len(seen(local)) >= 300, 60, "every record")
        wait_until(lambda: committed(kafka_address, group, topic) == ends(range(300)), 30, "commits at the end")
        spouts = [local.component("kafka", i) for i in range(2)]
        assert sorted(len(spout.partitions) for spout in spouts) == [1, 2]  # round robin over 3 partitions
    records = seen(local)
    assert len(records) == 300
    assert sorted((int(key), value) for _, _, _, key, value in records) == [
        (i, f"value {i}".encode()) for i in range(300)
    ]
    assert {(t, p, o) for t, p, o, _, _ in records} == {
        (topic, p, o) for p, end in ends(range(300)).items() for o in range(end)
    }


def test_a_restarted_topology_resumes_from_its_commits_and_earliest_reads_again(kafka_address: str) -> None:
    topic, group = new_topic(kafka_address), f"group-{uuid.uuid4().hex[:8]}"
    produce(kafka_address, topic, range(60))
    with LocalTopology(kafka_topology("resumer", kafka_address, topic, group), FAST) as local:
        wait_until(lambda: len(seen(local)) >= 60, 60, "the first records")
        wait_until(lambda: committed(kafka_address, group, topic) == ends(range(60)), 30, "commits at the end")
    produce(kafka_address, topic, range(60, 90))
    with LocalTopology(kafka_topology("resumer", kafka_address, topic, group), FAST) as local:
        wait_until(lambda: len(seen(local)) >= 30, 60, "the records produced while it was down")
        wait_until(lambda: committed(kafka_address, group, topic) == ends(range(90)), 30, "commits at the end")
    assert sorted(int(key) for _, _, _, key, _ in seen(local)) == list(range(60, 90))  # nothing read twice
    earliest = kafka_topology("rereader", kafka_address, topic, group, first_poll_offset_strategy="EARLIEST")
    with LocalTopology(earliest, FAST) as local:
        wait_until(lambda: len(seen(local)) >= 90, 60, "every record again")
    assert sorted(int(key) for _, _, _, key, _ in seen(local)) == list(range(90))


def test_latest_skips_what_was_there(kafka_address: str) -> None:
    topic, group = new_topic(kafka_address), f"group-{uuid.uuid4().hex[:8]}"
    produce(kafka_address, topic, range(30), batch_per_record=True)
    latest = kafka_topology("latest", kafka_address, topic, group, first_poll_offset_strategy="LATEST")
    with LocalTopology(latest, FAST) as local:
        wait_until(lambda: all(local.component("kafka", i).partitions for i in range(2)), 30, "partitions assigned")
        produced = 30

        def read_all_partitions() -> bool:  # the consumers find the end asynchronously: produce until they read
            nonlocal produced
            produce(kafka_address, topic, range(produced, produced + PARTITIONS), batch_per_record=True)
            produced += PARTITIONS
            return {p for _, p, _, _, _ in seen(local)} == set(range(PARTITIONS))

        wait_until(read_all_partitions, 60, "a record read from every partition")
    assert all(int(key) >= 30 for _, _, _, key, _ in seen(local))


class FailTwice(Bolt):
    """Fails key 7's tuple twice, then acks it; acks every other tuple. Records when each key arrived."""

    auto_ack = False

    def __init__(self) -> None:
        self.arrivals: list[tuple[int, float]] = []

    def execute(self, tup: Tuple) -> None:
        key = int(tup["key"])
        self.arrivals.append((key, time.monotonic()))
        if key == 7 and sum(1 for k, _ in self.arrivals if k == 7) <= 2:
            self.fail(tup)
        else:
            self.ack(tup)


def test_a_failed_tuple_is_retried_with_exponential_backoff(kafka_address: str) -> None:
    topic, group = new_topic(kafka_address), f"group-{uuid.uuid4().hex[:8]}"
    produce(kafka_address, topic, range(30))
    topology = kafka_topology("retrier", kafka_address, topic, group, sink=FailTwice,
                              retry={"initial_delay_ms": 0, "delay_period_ms": 300})
    with LocalTopology(topology, FAST) as local:
        sink = local.component("sink")
        wait_until(lambda: sum(1 for key, _ in sink.arrivals if key == 7) >= 3, 30, "key 7 read three times")
        wait_until(lambda: committed(kafka_address, group, topic) == ends(range(30)), 30, "commits at the end")
    arrivals = list(sink.arrivals)
    sevens = [at for key, at in arrivals if key == 7]
    assert len(sevens) == 3
    assert sevens[2] - sevens[1] >= 0.6  # the second retry waits delay_period * 2
    assert sorted(key for key, _ in arrivals if key != 7) == [k for k in range(30) if k != 7]  # no other re-read


class HoldUntilReleased(Bolt):
    """Acks nothing until ``release`` is set, then everything held, on its next tick."""

    auto_ack = False
    component_conf = {"topology.tick.tuple.freq.secs": 0.05}

    def __init__(self) -> None:
        self.held: list[Tuple] = []
        self.seen: list[tuple[str, str, tuple[Any, ...]]] = []
        self.release = False

    def execute(self, tup: Tuple) -> None:
        if not tup.is_tick:
            self.held.append(tup)
            self.seen.append((tup.component, tup.stream, tup.values))
        if self.release:
            for held in self.held:
                self.ack(held)
            self.held = []
        if tup.is_tick:
            self.ack(tup)


def test_a_partition_max_uncommitted_offsets_past_its_commit_is_paused_until_commits_catch_up(
        kafka_address: str) -> None:
    topic, group = new_topic(kafka_address), f"group-{uuid.uuid4().hex[:8]}"
    produce(kafka_address, topic, range(60))
    topology = kafka_topology("pauser", kafka_address, topic, group, sink=HoldUntilReleased,
                              max_uncommitted_offsets=5)
    with LocalTopology(topology, FAST) as local:
        spouts = [local.component("kafka", i) for i in range(2)]
        wait_until(lambda: sum(len(spout.paused) for spout in spouts) == PARTITIONS, 30, "every partition paused")
        assert Counter(p for _, p, _, _, _ in seen(local)) == {p: 5 for p in range(PARTITIONS)}
        local.component("sink").release = True
        wait_until(lambda: len(seen(local)) >= 60, 60, "every record, as commits catch up")
        wait_until(lambda: committed(kafka_address, group, topic) == ends(range(60)), 30, "commits at the end")
    assert sorted(int(key) for _, _, _, key, _ in seen(local)) == list(range(60))


@pytest.mark.parametrize("guarantee", ["AT_MOST_ONCE", "NO_GUARANTEE"])
def test_untracked_guarantees_emit_each_record_once_and_commit_without_acks(kafka_address: str,
                                                                           guarantee: str) -> None:
    topic, group = new_topic(kafka_address), f"group-{uuid.uuid4().hex[:8]}"
    produce(kafka_address, topic, range(30))
    topology = kafka_topology("untracked", kafka_address, topic, group, sink=FailTwice,
                              processing_guarantee=guarantee, first_poll_offset_strategy="EARLIEST")
    with LocalTopology(topology, FAST) as local:
        sink = local.component("sink")
        wait_until(lambda: len(sink.arrivals) >= 30, 30, "every record")
        if guarantee == "AT_MOST_ONCE":  # committed before it was emitted
            assert committed(kafka_address, group, topic) == ends(range(30))
        wait_until(lambda: committed(kafka_address, group, topic) == ends(range(30)), 30, "commits at the end")
    assert sorted(key for key, _ in sink.arrivals) == list(range(30))  # key 7 failed, and was not read again


def test_enable_auto_commit_is_refused_in_one_line() -> None:
    with pytest.raises(KafkaConfigError) as raised:
        KafkaSpout("localhost:9092", ["events"], {"group.id": "g", "enable.auto.commit": "true"})
    assert str(raised.value).startswith("enable.auto.commit is not allowed")
    assert "\n" not in str(raised.value)


# ------------------------------------------------------------------------------------------------
# On librdkafka's mock cluster (a Kafka-protocol server inside this process): the Tansu broker does not keep a
# commit's metadata, which the rule below reads.
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def mock_cluster() -> Iterator[str]:
    """``bootstrap.servers`` of a mock cluster that lives as long as the producer that started it."""
    starter = Producer({"test.mock.num.brokers": 1, "log_level": 2})
    brokers = starter.list_topics(timeout=10).brokers.values()
    yield ",".join(f"{broker.host}:{broker.port}" for broker in brokers)
    starter.flush(10)


def read_offsets(run: SpoutRun, count: int) -> list[int]:
    wait_until(lambda: run.next_batch(100) is not None and len(run.emitted) >= count, 30, f"{count} records")
    return [offset for _, _, offset, _, _ in run.values()]


def test_a_commit_this_topology_wrote_is_resumed_from_whatever_the_strategy(mock_cluster: str) -> None:
    producer = Producer({"bootstrap.servers": mock_cluster, "linger.ms": 0})
    for i in range(10):
        producer.produce("clicks", value=f"{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    spout: dict[str, Any] = {"cls": KafkaSpout, "args": [mock_cluster, "clicks", {"group.id": "readers"}],
                             "kwargs": {"first_poll_offset_strategy": "EARLIEST"}}
    this = make_context("kafka")
    first = run_spout(**spout, context=this)
    assert read_offsets(first, 10) == list(range(10))
    for msg_id in list(first.pending)[:4]:
        first.ack(msg_id)
    first.spout.deactivate()  # commits offset 4, naming this topology
    first.spout.close()
    again = run_spout(**spout, context=this)  # a restarted worker of the same topology
    assert read_offsets(again, 6) == list(range(4, 10))
    again.spout.close()
    redeployed = run_spout(**spout, context=replace(this, topology_id="test-2-1700000000"))
    assert read_offsets(redeployed, 10) == list(range(10))  # EARLIEST: another topology's commit is ignored
    redeployed.spout.close()


def test_declaring_the_spout_without_the_kafka_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRAS, "kafka", ("the Kafka client", ("no_such_kafka_client",)))
    with pytest.raises(MissingExtra) as raised:
        Topology("reader").spout("kafka", KafkaSpout, args=["localhost:9092", "events", {"group.id": "g"}])
    assert str(raised.value) == ("spout 'kafka' (KafkaSpout) needs the Kafka client (no_such_kafka_client not "
                                 "installed): pip install 'squall[kafka]'")


#: The user's own bolt the Guide's Kafka page imports (``from myapp.bolts import Count``): it counts by key.
MYAPP_BOLTS = """
from collections import Counter

from squall import Bolt


class Count(Bolt):
    counts: Counter = Counter()  # one process (local mode): the test reads it

    def execute(self, tup):
        Count.counts[tup["key"]] += 1
"""


def test_the_guide_s_kafka_blocks_read_a_topic_as_written(kafka_address: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The Guide's Kafka page as written, on the session's broker in place of its ``broker:9092``: its topology
    counts every record of ``clicks`` by key, and its translating spout emits ``(user, page)`` and skips a click
    without a page."""
    topology_block, clicks_block = (block.code for block in blocks_run_by(__file__, "docs/guide/kafka.md"))
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "bolts.py").write_text(MYAPP_BOLTS)
    (tmp_path / "clicks_page.py").write_text(clicks_block)
    monkeypatch.syspath_prepend(str(tmp_path))
    admin = AdminClient({"bootstrap.servers": kafka_address})
    for future in admin.create_topics([NewTopic("clicks", PARTITIONS, 1)]).values():
        future.result(30)
    produce(kafka_address, "clicks", range(30))
    page: dict[str, Any] = {}
    exec(compile(topology_block.replace("broker:9092", kafka_address), "docs/guide/kafka.md", "exec"), page)
    from myapp.bolts import Count  # type: ignore[import-not-found]

    with LocalTopology(page["topology"], FAST):
        wait_until(lambda: sum(Count.counts.values()) >= 30, 60, "every click counted")
    assert Count.counts == {str(i).encode(): 1 for i in range(30)}

    from clicks_page import Clicks  # type: ignore[import-not-found]

    topic = new_topic(kafka_address)
    producer = Producer({"bootstrap.servers": kafka_address, "linger.ms": 0})
    for click in ({"user": "ann", "page": "/a"}, {"user": "bob"}, {"user": "cy", "page": "/c"}):
        producer.produce(topic, value=json.dumps(click).encode(), partition=0)
    assert producer.flush(30) == 0
    translated = Topology("translated")
    spout = translated.spout("clicks", Clicks, args=[kafka_address, [topic], {"group.id": f"g-{uuid.uuid4().hex}"}])
    translated.bolt("sink", Recorder).shuffle(spout)
    with LocalTopology(translated, FAST) as local:
        wait_until(lambda: len(seen(local)) >= 2, 60, "the clicks with a page")  # bob's, between them, skipped
    assert sorted(seen(local)) == [("ann", "/a"), ("cy", "/c")]
