"""One partition's offsets as the Kafka spout tracks them under at-least-once, and the retry schedule: pure.

An offset becomes committable only when every offset before it that the spout read is done: acked, skipped by
the translator, or given up after the last retry. So the offset to commit (the next one to read after a
restart) is the lowest offset still in flight or waiting for a retry, or, when none is, the one after the
highest read. Offsets the broker never delivered (compaction, transaction markers) are gaps the spout never
read, so they hold nothing up. This is storm-kafka-client's "highest contiguous acked offset" rule.

A failed (or timed-out) offset waits for its retry, with exponential backoff (:class:`RetryPolicy`); the spout
re-reads the partition from the lowest due offset (Storm seeks back too: the values are not kept in memory), and
:meth:`PartitionOffsets.polled` tells which re-read records to emit again: those due for a retry, not those in
flight, waiting or done. A partition read ``max.uncommitted.offsets`` past its last commit is :meth:`full
<PartitionOffsets.full>`: the spout reads nothing new from it until commits catch up (retries still go on).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PartitionOffsets", "RetryPolicy"]


@dataclass(frozen=True)
class RetryPolicy:
    """Storm's ``KafkaSpoutRetryExponentialBackoff``: the first retry after ``initial_delay_secs``, the n-th
    after ``delay_period_secs * 2**(n-1)``, never later than ``max_delay_secs``; after ``max_retries`` failures
    (None: unlimited) the offset is given up, as if acked. Storm's defaults: 0 s, 2 ms, 10 s, unlimited."""

    initial_delay_secs: float = 0.0
    delay_period_secs: float = 0.002
    max_delay_secs: float = 10.0
    max_retries: int | None = None

    def delay(self, failures: int) -> float:
        """Seconds from the ``failures``-th failure of an offset to its retry."""
        if failures <= 1:
            return min(self.initial_delay_secs, self.max_delay_secs)
        return min(self.delay_period_secs * 2.0 ** min(failures - 1, 64), self.max_delay_secs)

    def gives_up(self, failures: int) -> bool:
        """An offset that failed ``failures`` times is not retried again."""
        return self.max_retries is not None and failures > self.max_retries


class PartitionOffsets:
    """What the spout read of one partition, what is in flight, what waits for a retry and what may be committed.

    ``start`` is where reading starts, or None when the first record read says so (the partition's beginning or
    end); ``committed``, the group's commit when reading resumes from it. Times are the caller's monotonic
    seconds."""

    def __init__(self, start: int | None, policy: RetryPolicy, committed: int | None = None) -> None:
        self.policy = policy
        #: The offset after the highest read (None: nothing read yet and the start unknown).
        self.fetched: int | None = start
        #: The offset after the last record read: below ``fetched`` while re-reading for a retry.
        self.position: int | None = start
        #: Where reading started: what counts as uncommitted before the first commit.
        self.start = start
        #: The last offset committed (None: nothing committed by this spout yet).
        self.committed = committed
        self.in_flight: set[int] = set()
        #: Offsets waiting for their retry: offset → when it is due.
        self.waiting: dict[int, float] = {}
        #: How often each offset not yet done has failed.
        self.failures: dict[int, int] = {}

    def polled(self, offset: int, now: float) -> bool:
        """A record was read at ``offset``: True if it is to be emitted (new, or due for its retry); it is then
        in flight. False for a re-read record that is in flight, waiting or done."""
        self.position = offset + 1
        if self.start is None:
            self.start = offset
        if self.fetched is None or offset >= self.fetched:
            self.fetched = offset + 1
            self.in_flight.add(offset)
            return True
        due = self.waiting.get(offset)
        if due is None or due > now:
            return False
        del self.waiting[offset]
        self.in_flight.add(offset)
        return True

    def done(self, offset: int) -> None:
        """The record at ``offset`` is done: acked, or not emitted at all (the translator skipped it)."""
        self.in_flight.discard(offset)
        self.failures.pop(offset, None)

    def failed(self, offset: int, now: float) -> bool:
        """The tuple of ``offset`` failed or timed out: True if it waits for a retry, False if given up (done)."""
        if offset not in self.in_flight:
            return False  # not ours any more (a late fail after a commit or a revoke)
        self.in_flight.discard(offset)
        failures = self.failures.get(offset, 0) + 1
        if self.policy.gives_up(failures):
            self.failures.pop(offset, None)
            return False
        self.failures[offset] = failures
        self.waiting[offset] = now + self.policy.delay(failures)
        return True

    def full(self, limit: int) -> bool:
        """``limit`` offsets or more were read past the last commit (Storm's ``max.uncommitted.offsets``): read
        nothing new until commits catch up."""
        base = self.committed if self.committed is not None else self.start
        return self.fetched is not None and base is not None and self.fetched - base >= limit

    def due(self, now: float) -> bool:
        """A retry is due at ``now``."""
        return any(at <= now for at in self.waiting.values())

    def seek(self, now: float) -> int | None:
        """Where to re-read from for the retries due at ``now``, when that is behind the read position (the
        position then moves there), else None."""
        if not self.waiting:
            return None
        due = [offset for offset, at in self.waiting.items() if at <= now]
        if not due or self.position is None or min(due) >= self.position:
            return None
        self.position = min(due)
        return self.position

    def rewind(self, offset: int) -> None:
        """Nothing from ``offset`` on was emitted after all (nothing is in flight): it is read again as new."""
        self.fetched = self.position = offset

    def committable(self) -> int | None:
        """The offset to commit now (the next to read after a restart), if it is past the last commit."""
        if self.fetched is None:
            return None
        offset = min((*self.in_flight, *self.waiting), default=self.fetched)
        return offset if self.committed is None or offset > self.committed else None

    def commit(self, offset: int) -> None:
        """``offset`` was committed."""
        self.committed = offset
