"""``/taskerrors/<topology-id>/<task>/<time>``: the last few errors of each task, one node per error.

Workers (component errors), supervisors (worker deaths) and nimbus (topology errors, filed under the
topology master's task) all write through :func:`record_task_error`, so the rule is in one place.
"""

from __future__ import annotations

from squall.zk import paths
from squall.zk.client import ZkClient
from squall.zk.records import MAX_VALUE_BYTES, TaskError

#: Errors kept per task (JStorm keeps 3).
MAX_ERRORS_PER_TASK = 3
#: Errors of one task in one second (say a worker's traceback and its supervisor's "exited") take the
#: next free second as their node name, up to this many; the record keeps the real time.
MAX_SAME_SECOND = 5
#: An error's text is cut to this many characters so a huge traceback cannot exceed the znode limit.
MAX_ERROR_CHARS = MAX_VALUE_BYTES // 8


def record_task_error(zk: ZkClient, topology_id: str, task: int, error: TaskError) -> None:
    """Store ``error`` as the newest of ``task``'s errors and drop all but the last few.

    With ZooKeeper auth the daemons and the topology's workers, each with their own credential, may all write and
    clean up here: every node under ``/taskerrors/<id>`` carries that node's ACL (:mod:`squall.zk.acls`)."""
    if len(error.error) > MAX_ERROR_CHARS:
        error = TaskError(**{**error.__dict__, "error": error.error[:MAX_ERROR_CHARS] + "\n… (cut)"})
    for key in range(error.time_secs, error.time_secs + MAX_SAME_SECOND):
        if zk.create(paths.task_error(topology_id, task, key), error):
            break
    for old in zk.children(paths.task_errors(topology_id, task))[:-MAX_ERRORS_PER_TASK]:
        zk.delete(paths.task_error(topology_id, task, int(old)))


def newest_error_times(zk: ZkClient, topology_id: str) -> dict[int, int]:
    """Each task's newest error time, from node names alone (no record is read): one ``children`` call
    for the topology and one per task that ever filed an error, cheap enough for every ``getClusterInfo``.
    A name is the error's second, or up to :data:`MAX_SAME_SECOND` later when that second was taken."""
    times = {}
    for task in zk.children(paths.task_errors_root(topology_id)):
        names = [int(n) for n in zk.children(paths.task_errors(topology_id, int(task)))] if task.isdigit() else []
        if names:
            times[int(task)] = max(names)
    return times
