"""The Kafka spout: storm-kafka-client's ``KafkaSpout`` on confluent-kafka (librdkafka's consumer).

    topology.spout("events", KafkaSpout, args=["broker:9092", ["events"]],
                   kwargs={"props": {"group.id": "weblogs"}}, parallelism=2)

Each task reads its share of the topics' partitions (round robin over the sorted partitions, refreshed every
``partition_refresh_period_ms`` so new partitions are picked up): Storm's manual assignment, no consumer-group
rebalancing. Records are read in batches and emitted with one ``emit_many`` per batch, each row a reliable tuple
whose message id is ``(topic, partition, offset)``. At least once: an offset is committed only once its tuple and
every tuple before it in its partition is done (:mod:`squall.api.kafka.offsets`); commits go to the group
``props["group.id"]`` every ``offset_commit_period_ms``, when the spout is deactivated or closed, and when a
partition moves to another task, each carrying which topology and task wrote it. A failed or timed-out tuple is
read again and re-emitted after an exponential backoff (``retry``: Storm's defaults). ``AT_MOST_ONCE`` and
``NO_GUARANTEE`` emit untracked tuples instead (:class:`~squall.api.kafka.options.ProcessingGuarantee`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from squall.api.component import Spout, TopologyContext
from squall.api.kafka.offsets import PartitionOffsets
from squall.api.kafka.options import (
    BEGINNING,
    ProcessingGuarantee,
    SpoutOptions,
    commit_metadata,
    committed_by,
    round_robin,
    start_offset,
)

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message

__all__ = ["KafkaSpout"]

#: How long a call to the broker that the spout must wait for (metadata, committed offsets, a commit) may take.
BROKER_TIMEOUT_SECS = 10.0


class KafkaSpout(Spout):
    """Reads topics of a Kafka cluster; the default translator emits ``topic, partition, offset, key, value``.

    ``bootstrap_servers`` and ``topics`` are Storm's ``KafkaSpoutConfig.builder(...)`` arguments; ``props`` any
    consumer property (``group.id`` is required; ``enable.auto.commit`` is refused); the keywords are Storm's
    setters: ``first_poll_offset_strategy`` (``UNCOMMITTED_EARLIEST``, ``EARLIEST``, ``LATEST``,
    ``UNCOMMITTED_LATEST``), ``processing_guarantee`` (``AT_LEAST_ONCE``, ``AT_MOST_ONCE``, ``NO_GUARANTEE``),
    ``offset_commit_period_ms`` (30,000), ``partition_refresh_period_ms`` (2,000),
    ``max_uncommitted_offsets`` (10,000,000 per partition: a partition read that far past its last commit is paused)
    and ``retry`` (``initial_delay_ms`` 0, ``delay_period_ms`` 2, ``max_delay_ms`` 10,000, ``max_retries``
    unlimited).

    Subclass it and override :meth:`translate` (and ``outputs``) to emit other values; a record it returns None
    for is skipped (and counts as done)::

        class Clicks(KafkaSpout):
            outputs = ["user", "page"]

            def translate(self, message):
                click = json.loads(message.value())
                return (click["user"], click["page"]) if click.get("page") else None

        topology.spout("clicks", Clicks, args=["broker:9092", ["clicks"], {"group.id": "clicks"}],
                       kwargs={"first_poll_offset_strategy": "EARLIEST"}, parallelism=3)
    """

    outputs = ["topic", "partition", "offset", "key", "value"]
    needs_extra = "kafka"

    def __init__(
        self,
        bootstrap_servers: str,
        topics: str | list[str],
        props: dict[str, Any] | None = None,
        *,
        first_poll_offset_strategy: str = "UNCOMMITTED_EARLIEST",
        processing_guarantee: str = "AT_LEAST_ONCE",
        offset_commit_period_ms: int = 30_000,
        partition_refresh_period_ms: int = 2_000,
        max_uncommitted_offsets: int = 10_000_000,
        retry: dict[str, Any] | None = None,
    ) -> None:
        self.options = SpoutOptions.of(
            bootstrap_servers, topics, props, first_poll_offset_strategy, processing_guarantee, offset_commit_period_ms,
            partition_refresh_period_ms, max_uncommitted_offsets, retry,
        )  # fmt: skip
        self.partitions: dict[tuple[str, int], PartitionOffsets] = {}
        #: Partitions paused because they are full (``max_uncommitted_offsets``).
        self.paused: set[tuple[str, int]] = set()

    def translate(self, message: Message) -> Sequence[Any] | None:
        """The values of a record's tuple (Storm's ``RecordTranslator``), or None to skip the record."""
        return (message.topic(), message.partition(), message.offset(), message.key(), message.value())

    def open(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        from confluent_kafka import Consumer

        self.consumer: Consumer = Consumer(dict(self.options.consumer))
        self.metadata = commit_metadata(context.topology_id, context.task_id, threading.current_thread().name)
        now = time.monotonic()
        self.refresh_at, self.commit_at = now, now + self.options.commit_period_secs

    def next_tuple(self) -> None:
        self.next_batch(1)

    def next_batch(self, max_rows: int) -> None:
        now = time.monotonic()
        if now >= self.refresh_at:
            self.refresh_at = now + self.options.refresh_period_secs
            self._refresh()
        if now >= self.commit_at:
            self.commit_at = now + self.options.commit_period_secs
            self._commit(list(self.partitions))
        self._seek_retries(now)
        self._resume(now)
        limit, guarantee = self.options.max_uncommitted, self.options.guarantee
        tracked = guarantee is ProcessingGuarantee.AT_LEAST_ONCE
        rows: list[Sequence[Any]] = []
        ids: list[tuple[str, int, int]] = []
        first: dict[tuple[str, int], int] = {}  # each partition's first offset read in this batch
        for message in self.consumer.consume(max_rows, 0):
            if message.error():
                self.log.warning("kafka consumer error", error=str(message.error()))
                continue
            key = cast("tuple[str, int]", (message.topic(), message.partition()))  # a record has both, and an offset
            offset = cast(int, message.offset())
            offsets = self.partitions.get(key)
            if offsets is None or key in self.paused:
                continue
            if offsets.fetched is not None and offset >= offsets.fetched and offsets.full(limit):
                self._pause(key, offset)
                continue
            if not offsets.polled(offset, now):
                continue
            if not tracked:
                offsets.done(offset)
                first.setdefault(key, offset)
            values = self.translate(message)
            if values is None:
                offsets.done(offset)
                continue
            rows.append(values)
            ids.append((*key, offset))
        if tracked:
            if rows:
                self.emit_many(rows, msg_ids=ids)
        elif guarantee is ProcessingGuarantee.NO_GUARANTEE or self._commit(list(first)):
            if rows:
                self.emit_many(rows)
        else:  # at most once, and the commit failed: emit nothing, read the batch again later
            for key, offset in first.items():
                self.partitions[key].rewind(offset)
                self._seek(key, offset)

    def ack(self, msg_id: tuple[str, int, int]) -> None:
        topic, partition, offset = msg_id
        if (offsets := self.partitions.get((topic, partition))) is not None:
            offsets.done(offset)

    def fail(self, msg_id: tuple[str, int, int]) -> None:
        topic, partition, offset = msg_id
        if (offsets := self.partitions.get((topic, partition))) is not None:
            offsets.failed(offset, time.monotonic())

    def deactivate(self) -> None:
        self._commit(list(self.partitions))

    def close(self) -> None:
        if hasattr(self, "consumer"):
            self._commit(list(self.partitions))
            self.consumer.close()

    # -- the consumer's adapter ---------------------------------------------------------------------------------

    def _refresh(self) -> None:
        """Take this task's share of the topics' partitions now: new ones start where the first-poll strategy
        says, those gone to other tasks are committed and dropped."""
        from confluent_kafka import KafkaException

        try:
            topics = self.consumer.list_topics(timeout=BROKER_TIMEOUT_SECS).topics
            found = [(name, partition) for name in self.options.topics if name in topics
                     for partition in topics[name].partitions]  # fmt: skip
            mine = round_robin(found, self.context.task_index, len(self.context.tasks))
            added = [key for key in mine if key not in self.partitions]
            partitions = [self._partition(key) for key in added]
            commits = self.consumer.committed(partitions, timeout=BROKER_TIMEOUT_SECS) if added else []
        except KafkaException as exc:  # the broker is away: the next refresh tries again
            self.log.warning("kafka partitions not refreshed", error=str(exc))
            return
        revoked = [key for key in self.partitions if key not in mine]
        if revoked:
            self._commit(revoked)
            if held := [self._partition(key) for key in revoked if key in self.paused]:
                self.consumer.resume(held)  # a partition assigned again later starts unpaused
                self.paused.difference_update(revoked)
            self.consumer.incremental_unassign([self._partition(key) for key in revoked])
            for key in revoked:
                del self.partitions[key]
        if added:
            self.consumer.incremental_assign([self._start(key, found) for key, found in zip(added, commits)])
        if added or revoked:
            self.log.info("kafka partitions assigned", added=added, revoked=revoked)

    def _start(self, key: tuple[str, int], found: Any) -> Any:
        """Where ``key``'s reading starts, given the group's commit (``found``), with its offsets' state made, as
        the consumer's TopicPartition."""
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

        committed = found.offset if found.offset >= 0 else None
        by_this_topology = committed_by(found.metadata) == self.context.topology_id
        start = start_offset(self.options.first_poll, committed, by_this_topology)
        if isinstance(start, int):
            self.partitions[key] = PartitionOffsets(start, self.options.retry, committed=committed)
            return self._partition(key, start)
        self.partitions[key] = PartitionOffsets(None, self.options.retry)
        return self._partition(key, OFFSET_BEGINNING if start == BEGINNING else OFFSET_END)

    def _seek_retries(self, now: float) -> None:
        """Read partitions again from their retries that are due."""
        for key, offsets in self.partitions.items():
            if offsets.waiting and (offset := offsets.seek(now)) is not None:
                self._seek(key, offset)

    def _seek(self, key: tuple[str, int], offset: int) -> None:
        from confluent_kafka import KafkaException

        try:
            self.consumer.seek(self._partition(key, offset))
        except KafkaException as exc:  # not fetching yet: the next record read moves past, and it is sought
            self.log.warning("kafka seek failed", partition=key, offset=offset, error=str(exc))

    def _pause(self, key: tuple[str, int], offset: int) -> None:
        """Read nothing more of ``key`` (full) until :meth:`_resume`; the record at ``offset`` is read again then."""
        from confluent_kafka import KafkaException

        try:
            self.consumer.pause([self._partition(key)])
            self.consumer.seek(self._partition(key, offset))
        except KafkaException as exc:  # left unpaused: the next record read of it tries again
            self.log.warning("kafka pause failed", partition=key, error=str(exc))
            return
        self.partitions[key].position = offset
        self.paused.add(key)

    def _resume(self, now: float) -> None:
        """Read again the paused partitions whose commits caught up, or that have a retry due."""
        limit = self.options.max_uncommitted
        ready = [key for key in self.paused if not self.partitions[key].full(limit) or self.partitions[key].due(now)]
        if ready:
            self.consumer.resume([self._partition(key) for key in ready])
            self.paused.difference_update(ready)

    def _commit(self, keys: list[tuple[str, int]]) -> bool:
        """Commit each partition's committable offset with the metadata naming this topology and task:
        synchronously (Storm's ``commitSync``), but for ``NO_GUARANTEE``. False if the commit failed."""
        from confluent_kafka import KafkaException

        due = {key: offset for key in keys if (offset := self.partitions[key].committable()) is not None}
        if not due:
            return True
        offsets = [self._partition(key, offset, self.metadata) for key, offset in due.items()]
        try:
            if self.options.guarantee is ProcessingGuarantee.NO_GUARANTEE:
                self.consumer.commit(offsets=offsets, asynchronous=True)
                failed = []
            else:
                failed = [tp for tp in self.consumer.commit(offsets=offsets, asynchronous=False) if tp.error]
        except KafkaException as exc:  # the broker is away: the next period commits as far again
            self.log.warning("kafka commit failed", error=str(exc))
            return False
        errors = {(tp.topic, tp.partition): str(tp.error) for tp in failed}
        if errors:
            self.log.warning("kafka commit failed", errors=errors)
        for key, offset in due.items():
            if key not in errors:
                self.partitions[key].commit(offset)
        return not errors

    @staticmethod
    def _partition(key: tuple[str, int], offset: int | None = None, metadata: str | None = None) -> Any:
        from confluent_kafka import TopicPartition

        if offset is None:
            return TopicPartition(*key)
        return TopicPartition(*key, offset, metadata=metadata) if metadata else TopicPartition(*key, offset)
