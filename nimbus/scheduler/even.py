"""Storm's EvenScheduler, as a pure function (reference/storm.md §4.2; seed 001).

Free slots are interleaved across supervisors (:func:`sort_slots`) and the tasks still needing a
home are dealt round robin over the first few of them, so consecutive tasks land on different
nodes and every worker gets ``n // k`` or ``n // k + 1`` tasks. Storm deals executors; our model has
one executor per task, so we deal tasks.

Which old workers stay put depends on the assign type:

* ``NEW``: none. ``old_workers`` is only a hint for schedulers that reuse slots; this one ignores it.
* ``REBALANCE``: none; everything is dealt afresh.
* ``MONITOR``: every old worker that is still *alive* keeps its slot and its tasks untouched; only
  the tasks of dead workers are dealt again. Alive means: its supervisor is live and still offers
  its port to us (listed, not taken by another topology), it holds no dead task, and all its tasks
  belong to the topology.

Like Storm (which hides dead slots for one round, ``Nimbus.computeSupervisorToDeadPorts``), a
dead worker's slot is not the first choice for its own tasks: such slots go to the end of the slot
order, so they are reused only when the cluster has nothing else.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from itertools import zip_longest

from nimbus.scheduler.model import AssignType, ScheduleError, ScheduleRequest, Supervisor
from squall.core.zk.records import WorkerAssignment

Slot = tuple[str, int]  # (supervisor id, port)

DEFAULT_WORKER_MEMORY = 2147483648
DEFAULT_WORKER_CPU = 1


def schedule(request: ScheduleRequest) -> list[WorkerAssignment]:
    """Keep alive workers (MONITOR only) and deal the other tasks round robin over interleaved slots."""
    all_tasks = {t for c in request.components for t in c.tasks}
    if not all_tasks:
        raise ScheduleError(f"topology {request.topology_id} has no tasks to schedule")
    supervisors = {s.id: s for s in request.supervisors}

    kept = alive_workers(request, all_tasks) if request.assign_type is AssignType.MONITOR else []
    kept_slots = {(w.supervisor_id, w.port) for w in kept}
    to_place = sorted(all_tasks.difference(t for w in kept for t in w.tasks))
    if not to_place:
        return _sorted(kept)

    free = [slot for slot in offered_slots(supervisors.values()) if slot not in kept_slots]
    dead_slots = _dead_slots(request) if request.assign_type is AssignType.MONITOR else set()
    ordered = sort_slots(s for s in free if s not in dead_slots) + sort_slots(s for s in free if s in dead_slots)

    workers = int(request.conf.get("topology.workers") or 1)
    # Storm would leave orphans unassigned for a round when kept workers already reach
    # topology.workers; every task must run, so they always get at least one slot.
    wanted = max(workers - len(kept), 1)
    if not ordered:
        raise ScheduleError(
            _no_slot_message(request, len(to_place), min(wanted, len(to_place)), supervisors.values(), len(kept))
        )
    total_slots_to_use = min(workers, len(ordered) + len(kept))
    slots = ordered[: max(total_slots_to_use - len(kept), 1)]

    dealt: dict[Slot, list[int]] = defaultdict(list)
    for i, task in enumerate(to_place):
        dealt[slots[i % len(slots)]].append(task)

    mem = int(request.conf.get("worker.memory.size", DEFAULT_WORKER_MEMORY))
    cpu = int(request.conf.get("worker.cpu.slot.num", DEFAULT_WORKER_CPU))
    placed = [
        WorkerAssignment(sid, supervisors[sid].host, port, tasks, mem, cpu) for (sid, port), tasks in dealt.items()
    ]
    return _sorted([*kept, *placed])


def wanted_workers(request: ScheduleRequest) -> int:
    """Workers the topology runs on when the cluster has the slots: ``topology.workers``, one per task at most."""
    tasks = sum(len(c.tasks) for c in request.components)
    return max(1, min(int(request.conf.get("topology.workers") or 1), tasks))


def sort_slots(slots: Iterable[Slot]) -> list[Slot]:
    """Interleave slots across supervisors so consecutive slots sit on different nodes.

    Groups by supervisor id ascending, ports ascending within a group; the groups are then stably
    sorted by size, largest first (so the biggest nodes are never left holding the tail), and the
    result takes the first slot of every group, then the second of every group, and so on.
    """
    ports: dict[str, set[int]] = defaultdict(set)
    for supervisor_id, port in slots:
        ports[supervisor_id].add(port)
    groups = [[(sid, p) for p in sorted(ports[sid])] for sid in sorted(ports)]
    groups.sort(key=len, reverse=True)  # list.sort is stable: equal sizes keep id order
    return [slot for row in zip_longest(*groups) for slot in row if slot is not None]


def offered_slots(supervisors: Iterable[Supervisor]) -> list[Slot]:
    """Every (supervisor, port) a supervisor lists and no other topology holds."""
    return [(s.id, p) for s in supervisors for p in sorted(set(s.ports)) if p not in s.used_ports]


def alive_workers(request: ScheduleRequest, all_tasks: set[int]) -> list[WorkerAssignment]:
    """Old workers that can stay exactly as they are; the first claim on a slot or task wins."""
    offered = set(offered_slots(request.supervisors))
    kept: list[WorkerAssignment] = []
    claimed_slots: set[Slot] = set()
    claimed_tasks: set[int] = set()
    for w in _sorted(request.old_workers):
        slot, tasks = (w.supervisor_id, w.port), set(w.tasks)
        if (
            slot in offered
            and slot not in claimed_slots
            and tasks
            and tasks <= all_tasks
            and not tasks & request.dead_tasks
            and not tasks & claimed_tasks
        ):
            kept.append(w)
            claimed_slots.add(slot)
            claimed_tasks |= tasks
    return kept


def _dead_slots(request: ScheduleRequest) -> set[Slot]:
    return {(w.supervisor_id, w.port) for w in request.old_workers if request.dead_tasks.intersection(w.tasks)}


def _no_slot_message(
    request: ScheduleRequest, n_tasks: int, needed: int, supervisors: Iterable[Supervisor], kept: int
) -> str:
    supervisors = list(supervisors)
    total = sum(len(set(s.ports)) for s in supervisors)
    taken = sum(len(set(s.ports) & s.used_ports) for s in supervisors)
    return (
        f"no free worker slot for topology {request.topology_id}: {n_tasks} task(s) need placing, "
        f"needed {needed} slot(s), 0 free "
        f"({len(supervisors)} live supervisor(s) with {total} slot(s): {taken} used by other topologies, "
        f"{kept} kept by this topology); add supervisors or supervisor.slots.ports, "
        "or kill/rebalance other topologies"
    )


def _sorted(workers: Iterable[WorkerAssignment]) -> list[WorkerAssignment]:
    """Output order: by supervisor id then port, each worker's tasks ascending."""
    return sorted(
        (
            w
            if w.tasks == sorted(w.tasks)
            else WorkerAssignment(w.supervisor_id, w.host, w.port, sorted(w.tasks), w.mem, w.cpu)
            for w in workers
        ),
        key=lambda w: (w.supervisor_id, w.port),
    )
