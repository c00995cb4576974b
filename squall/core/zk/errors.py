"""``/taskerrors/<topology-id>/<task>/<time>``: the last few errors of each task, one node per error.

Workers (component errors), supervisors (worker deaths) and nimbus (topology errors, filed under the
topology master's task) all write through :func:`record_task_error`, so the rule is in one place.
"""

from __future__ import annotations

from collections.abc import Iterable

from squall.core.clock import Clock
from squall.core.zk import paths
from squall.core.zk.client import ZkClient
from squall.core.zk.records import MAX_VALUE_BYTES, TaskError

#: Errors kept per task (JStorm keeps 3).
MAX_ERRORS_PER_TASK = 3
#: Errors of one task in one second (say a worker's traceback and its supervisor's "exited") take the
#: next free second as their node name, up to this many; the record keeps the real time.
MAX_SAME_SECOND = 5
#: An error's text is cut to this many characters so a huge traceback cannot exceed the znode limit; the cut is
#: in the middle, so a traceback keeps its exception, its last lines.
MAX_ERROR_CHARS = MAX_VALUE_BYTES // 8
_CUT = "\n… (cut) …\n"
_TRACEBACK = "Traceback (most recent call last):"


def error_summary(text: str) -> str:
    r"""The line people read an error by: a traceback's exception (``type: message``, the lines after its last
    frame, on one line), else the text's first line. Tracebacks are what tasks report, and their first line
    says only that one follows.

    >>> error_summary('Traceback (most recent call last):\n  File "bolt.py", line 3, in process\n    1 / 0\n'
    ...               'ZeroDivisionError: division by zero')
    'ZeroDivisionError: division by zero'
    >>> error_summary("worker 7f3a on port 6701 exited with code 1; restarting it now")
    'worker 7f3a on port 6701 exited with code 1; restarting it now'
    """
    lines = text.strip().splitlines()
    if _TRACEBACK not in text:
        return lines[0] if lines else ""
    tail: list[str] = []
    for line in reversed(lines):
        if not line.strip() or line[0].isspace() or _TRACEBACK in line:
            break
        tail.append(line.strip())
    return " ".join(reversed(tail)) or lines[-1].strip()


def record_task_error(zk: ZkClient, topology_id: str, task: int, error: TaskError) -> None:
    """Store ``error`` as the newest of ``task``'s errors and drop all but the last few.

    With ZooKeeper auth the daemons and the topology's workers, each with their own credential, may all write and
    clean up here: every node under ``/taskerrors/<id>`` carries that node's ACL (:mod:`squall.core.zk.acls`)."""
    if len(error.error) > MAX_ERROR_CHARS:
        half = (MAX_ERROR_CHARS - len(_CUT)) // 2
        error = TaskError(**{**error.__dict__, "error": error.error[:half] + _CUT + error.error[-half:]})
    for key in range(error.time_secs, error.time_secs + MAX_SAME_SECOND):
        if zk.create(paths.task_error(topology_id, task, key), error):
            break
    for old in zk.children(paths.task_errors(topology_id, task))[:-MAX_ERRORS_PER_TASK]:
        zk.delete(paths.task_error(topology_id, task, int(old)))


def newest_error_times(zk: ZkClient, topology_id: str) -> dict[int, int]:
    """Each task's newest error time, from node names alone (no record is read): one ``children`` call for
    the topology and one per task that ever filed an error (:class:`ErrorTimesCache` keeps that off each
    query). A name is the error's second, or up to :data:`MAX_SAME_SECOND` later when that second was taken."""
    times = {}
    for task in zk.children(paths.task_errors_root(topology_id)):
        names = [int(n) for n in zk.children(paths.task_errors(topology_id, int(task)))] if task.isdigit() else []
        if names:
            times[int(task)] = max(names)
    return times


class ErrorTimesCache:
    """:func:`newest_error_times` of each topology, read at most once per ``max_age_secs`` however many clients
    ask: nimbus answers every ``getClusterInfo`` (``storm list``, each UI refresh) from it, and a bolt raising
    in 50 tasks makes that 51 ZooKeeper reads per topology. An error shows up to ``max_age_secs`` late
    (nimbus uses its monitor period, ``nimbus.monitor.freq.secs``); its age is still counted from its time.
    The newest error of each task is read too (:meth:`lines`), once per error: only a task whose newest error
    changed costs a read more.

        cache = ErrorTimesCache(zk, clock, max_age_secs=10)
        cache.of(["wc-1-1700000000"])   # {"wc-1-1700000000": {3: 1700000088}}
        cache.lines(["wc-1-1700000000"])   # {"wc-1-1700000000": {3: "ZeroDivisionError: division by zero"}}
    """

    def __init__(self, zk: ZkClient, clock: Clock, max_age_secs: float) -> None:
        self.zk, self.clock, self.max_age_secs = zk, clock, max_age_secs
        # topology id -> (when read, its times, the summary line of each task's newest error)
        self._read: dict[str, tuple[float, dict[int, int], dict[int, str]]] = {}

    def of(self, topology_ids: Iterable[str]) -> dict[str, dict[int, int]]:
        """The times of these topologies; the others are forgotten (killed ones do not pile up)."""
        return {topology_id: times for topology_id, (_, times, _) in self._refresh(topology_ids).items()}

    def lines(self, topology_ids: Iterable[str]) -> dict[str, dict[int, str]]:
        """Each task's newest error as one line (:func:`error_summary`), as read with its time (:meth:`of`)."""
        return {topology_id: lines for topology_id, (_, _, lines) in self._refresh(topology_ids).items()}

    def _refresh(self, topology_ids: Iterable[str]) -> dict[str, tuple[float, dict[int, int], dict[int, str]]]:
        now = self.clock.monotonic()
        read = {}
        for topology_id in topology_ids:
            entry = self._read.get(topology_id)
            if entry is None or now - entry[0] >= self.max_age_secs:
                entry = (now, *self._read_errors(topology_id, entry))
            read[topology_id] = entry
        self._read = read
        return read

    def _read_errors(
        self, topology_id: str, before: tuple[float, dict[int, int], dict[int, str]] | None
    ) -> tuple[dict[int, int], dict[int, str]]:
        times = newest_error_times(self.zk, topology_id)
        old_times, old_lines = (before[1], before[2]) if before else ({}, {})
        lines = {}
        for task, name in times.items():
            if old_times.get(task) == name and task in old_lines:
                lines[task] = old_lines[task]
            elif (error := self.zk.read(paths.task_error(topology_id, task, name), TaskError)) is not None:
                lines[task] = error_summary(error.error)
        return times, lines
