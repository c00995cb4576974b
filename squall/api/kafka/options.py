"""The Kafka spout's options in storm-kafka-client's names, checked, and the pure decisions they drive: where a
partition's reading starts (the first-poll strategy) and which partitions a task reads (round robin).

Options a user sets are Storm's ``KafkaSpoutConfig`` setters as keyword arguments, and any consumer property
(``group.id``, ``fetch.min.bytes``, ...) in ``props``, as Storm's ``setProp``. The spout commits offsets itself,
after acks, so ``enable.auto.commit`` is refused, as Storm refuses it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from squall.api.kafka.offsets import RetryPolicy

__all__ = [
    "BEGINNING",
    "END",
    "FirstPollOffsetStrategy",
    "KafkaConfigError",
    "ProcessingGuarantee",
    "SpoutOptions",
    "commit_metadata",
    "committed_by",
    "round_robin",
    "start_offset",
]

#: Where a partition's reading starts when no offset is given: its first record, or after its last.
BEGINNING, END = "beginning", "end"


class KafkaConfigError(ValueError):
    """A Kafka spout option that cannot work; the message names the fix."""


class FirstPollOffsetStrategy(str, Enum):
    """Where a partition's reading starts (Storm's ``FirstPollOffsetStrategy``). ``EARLIEST`` and ``LATEST`` ignore
    the group's commit, ``UNCOMMITTED_*`` resume from it when there is one; whichever, a commit this same
    topology wrote is always resumed from (a restarted worker or a rebalance loses and repeats nothing)."""

    EARLIEST = "EARLIEST"
    LATEST = "LATEST"
    UNCOMMITTED_EARLIEST = "UNCOMMITTED_EARLIEST"
    UNCOMMITTED_LATEST = "UNCOMMITTED_LATEST"


class ProcessingGuarantee(str, Enum):
    """What the spout promises (Storm's ``ProcessingGuarantee``). ``AT_LEAST_ONCE``: every record is a reliable
    tuple, its offset committed once it and those before it are acked, failures retried. ``AT_MOST_ONCE``: each
    batch read is committed before it is emitted, untracked: a record is never emitted twice, and may be lost.
    ``NO_GUARANTEE``: untracked, committed asynchronously every commit period: zero, one or more times."""

    AT_LEAST_ONCE = "AT_LEAST_ONCE"
    AT_MOST_ONCE = "AT_MOST_ONCE"
    NO_GUARANTEE = "NO_GUARANTEE"


def _choice(name: str, kind: type[Enum], value: Any) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise KafkaConfigError(f"{name} must be one of {', '.join(m.value for m in kind)}, got {value!r}") from None


@dataclass(frozen=True)
class SpoutOptions:
    """The checked options (:func:`SpoutOptions.of`); times in seconds."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    consumer: Mapping[str, Any]
    first_poll: FirstPollOffsetStrategy
    guarantee: ProcessingGuarantee
    commit_period_secs: float
    refresh_period_secs: float
    max_uncommitted: int
    retry: RetryPolicy

    @classmethod
    def of(
        cls,
        bootstrap_servers: str,
        topics: str | Sequence[str],
        props: Mapping[str, Any] | None,
        first_poll_offset_strategy: str,
        processing_guarantee: str,
        offset_commit_period_ms: int,
        partition_refresh_period_ms: int,
        max_uncommitted_offsets: int,
        retry: Mapping[str, Any] | None,
    ) -> SpoutOptions:
        """The options of :class:`~squall.api.kafka.spout.KafkaSpout`'s arguments, or :class:`KafkaConfigError`."""
        props = dict(props or {})
        if "enable.auto.commit" in props:
            raise KafkaConfigError(
                "enable.auto.commit is not allowed: the Kafka spout commits offsets itself once their tuples are "
                "acked (offset.commit.period.ms): remove it from props"
            )
        if not props.get("group.id"):
            raise KafkaConfigError("the Kafka spout needs a consumer group for its commits: set props['group.id']")
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers:
            raise KafkaConfigError(f"bootstrap_servers must be 'host:port[,host:port...]', got {bootstrap_servers!r}")
        names = (topics,) if isinstance(topics, str) else tuple(topics)
        if not names or not all(isinstance(name, str) and name for name in names):
            raise KafkaConfigError(f"topics must be a topic name or a list of them, got {topics!r}")
        first_poll = _choice("first_poll_offset_strategy", FirstPollOffsetStrategy, first_poll_offset_strategy)
        guarantee = _choice("processing_guarantee", ProcessingGuarantee, processing_guarantee)
        for name, value in (("offset_commit_period_ms", offset_commit_period_ms),
                            ("partition_refresh_period_ms", partition_refresh_period_ms)):  # fmt: skip
            if not isinstance(value, int | float) or value <= 0:
                raise KafkaConfigError(f"{name} must be a positive number of milliseconds, got {value!r}")
        if not isinstance(max_uncommitted_offsets, int) or max_uncommitted_offsets <= 0:
            raise KafkaConfigError(
                f"max_uncommitted_offsets must be a positive integer, got {max_uncommitted_offsets!r}"
            )
        return cls(
            bootstrap_servers=bootstrap_servers,
            topics=names,
            consumer={
                "auto.offset.reset": "earliest" if guarantee is ProcessingGuarantee.AT_LEAST_ONCE else "latest",
                **props,
                "bootstrap.servers": bootstrap_servers,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
            },
            first_poll=first_poll,
            guarantee=guarantee,
            commit_period_secs=offset_commit_period_ms / 1000,
            refresh_period_secs=partition_refresh_period_ms / 1000,
            max_uncommitted=max_uncommitted_offsets,
            retry=retry_policy(retry or {}),
        )


def retry_policy(retry: Mapping[str, Any]) -> RetryPolicy:
    """Storm's exponential backoff from ``{"initial_delay_ms", "delay_period_ms", "max_delay_ms", "max_retries"}``
    (each optional: Storm's defaults)."""
    known = {"initial_delay_ms", "delay_period_ms", "max_delay_ms", "max_retries"}
    if unknown := sorted(set(retry) - known):
        raise KafkaConfigError(f"unknown retry option {unknown[0]!r}: the options are {', '.join(sorted(known))}")
    defaults = RetryPolicy()
    return RetryPolicy(
        initial_delay_secs=retry.get("initial_delay_ms", defaults.initial_delay_secs * 1000) / 1000,
        delay_period_secs=retry.get("delay_period_ms", defaults.delay_period_secs * 1000) / 1000,
        max_delay_secs=retry.get("max_delay_ms", defaults.max_delay_secs * 1000) / 1000,
        max_retries=retry.get("max_retries"),
    )


def commit_metadata(topology_id: str, task_id: int, thread: str) -> str:
    """What each commit carries, as Storm's ``CommitMetadata``: which topology and task wrote it."""
    return json.dumps({"topologyId": topology_id, "taskId": task_id, "threadName": thread})


def committed_by(metadata: str | None) -> str | None:
    """The topology id a commit's metadata names (None: not a spout's commit, or no metadata kept)."""
    try:
        found = json.loads(metadata) if metadata else None
    except ValueError:
        return None
    return found.get("topologyId") if isinstance(found, dict) else None


def start_offset(strategy: FirstPollOffsetStrategy, committed: int | None, by_this_topology: bool) -> int | str:
    """Where an assigned partition's reading starts: an offset, :data:`BEGINNING` or :data:`END`. ``committed`` is
    the group's commit (None: none), ``by_this_topology`` whether this topology wrote it."""
    if committed is not None and (by_this_topology or strategy.name.startswith("UNCOMMITTED_")):
        return committed
    return END if strategy.name.endswith("LATEST") else BEGINNING


def round_robin(partitions: Sequence[tuple[str, int]], index: int, count: int) -> list[tuple[str, int]]:
    """The partitions task ``index`` of ``count`` reads (Storm's ``RoundRobinManualPartitioner``): of all of them
    sorted, the index-th, then every count-th."""
    return sorted(partitions)[index::count]
