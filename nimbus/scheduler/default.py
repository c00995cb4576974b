"""JStorm's default topology scheduler, as a pure function.

Three steps, as in JStorm (reference/jstorm.md §5.2–5.4):

1. *How many workers*: ``topology.workers`` capped by the tasks to run, plus one for the topology
   master when it gets a worker of its own; minus the workers that stay where they are; capped by the
   free slots.
2. *Where the workers go*: requested (user-defined, old, sticky) slots first, then the rest spread
   over supervisors by used slots against the cluster average.
3. *Which tasks each worker runs*: the topology master alone, sticky tasks back to their slots,
   ``task.on.differ.node`` components one per node, ackers, then user tasks; each task goes to the
   worker with the fewest tasks of its component, then the fewest tasks, then the most tasks of
   components it talks to (each criterion narrowed by the worker's supervisor on ties). A pool rule
   keeps every worker at avg or avg+1 tasks.

Deviations from JStorm 2.4, on purpose: with fewer free slots than workers wanted, the topology runs on
the slots there are, as Storm's schedulers do (JStorm refuses it); nimbus adds workers as slots free up
(:func:`wanted_workers` is the count it grows to). Ackers are placed *before* user tasks (as seed 002 describes),
so they spread one per worker and spouts still land beside the bolts they feed. The topology master
gets its own worker at ``TM_ALONE_AT`` workers or more unless ``topology.master.single.worker`` says
otherwise (JStorm uses both >= 10 and > 10 in different places; we use >= 10).

Speed: choosing a worker is a heap of per-worker keys, rebuilt once per run of same-component tasks
and updated only for the workers on the supervisor that just got a task, so a 10,000-task topology
schedules in well under a second.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nimbus.scheduler.model import AssignType, Component, ScheduleError, ScheduleRequest, Supervisor
from squall.core.system_ids import TOPOLOGY_MASTER
from squall.core.zk.records import WorkerAssignment

TM_ALONE_AT = 10


@dataclass
class _Worker:
    """A worker being built: where it will run (once placed) and its tasks."""

    mem: int
    cpu: int
    tasks: list[int] = field(default_factory=list)
    host: str | None = None  # requested slot, if any, until placed
    port: int | None = None
    supervisor_id: str | None = None
    supervisor: Supervisor | None = None
    complete: bool = False  # user-defined or reused: takes no further tasks


def schedule(request: ScheduleRequest) -> list[WorkerAssignment]:
    conf = request.conf
    components = {c.id: c for c in request.components}
    task_component = {t: c.id for c in request.components for t in c.tasks}
    if not task_component:
        raise ScheduleError(f"topology {request.topology_id} has no tasks to schedule")
    total, tm_alone = worker_count(request.components, conf)

    keep, need, excluded_slots = _split_old_workers(request, set(task_component))
    if not need:
        return _sorted(keep)
    alloc = min(max(total - len(keep), 1), len(need))

    candidates = _candidate_supervisors(request)
    free, alloc = _free_ports(candidates, keep, excluded_slots, alloc, conf, request.topology_id)
    tm_alone = tm_alone and (alloc > 1 or need <= _tasks_of(TOPOLOGY_MASTER, components))

    sticky = request.assign_type is AssignType.REBALANCE and not request.reassign
    remaining = set(need)
    mem, cpu = int(conf.get("worker.memory.size", 2 << 30)), int(conf.get("worker.cpu.slot.num", 1))
    workers = _user_defined_workers(conf, components, remaining, mem, cpu)
    if conf.get("use.old.assignment") and request.old_workers:
        workers += _reused_workers(request.old_workers, remaining, mem, cpu)
    elif sticky:  # rebalance without -r: same slots, tasks chosen afresh
        kept_slots = {(k.supervisor_id, k.port) for k in keep}
        old_slots = [w for w in _sorted(request.old_workers) if (w.supervisor_id, w.port) not in kept_slots]
        workers += [_Worker(mem, cpu, host=w.host, port=w.port, supervisor_id=w.supervisor_id) for w in old_slots][
            : alloc - len(workers)
        ]
    if len(workers) > alloc:
        raise ScheduleError(
            f"topology {request.topology_id}: {len(workers)} user-defined or reused workers but only {alloc} "
            "workers to allocate; raise topology.workers or define fewer workers"
        )
    workers += [_Worker(mem, cpu) for _ in range(alloc - len(workers))]

    _place_workers(workers, candidates, free, keep)
    old_slot = {t: (w.supervisor_id, w.port) for w in request.old_workers for t in w.tasks} if sticky else {}
    _TaskPlacer(workers, components, task_component, tm_alone).place(sorted(remaining), old_slot)

    placed = [
        WorkerAssignment(w.supervisor.id, w.supervisor.host, w.port, sorted(w.tasks), w.mem, w.cpu)
        for w in workers
        if w.tasks and w.supervisor is not None and w.port is not None
    ]
    return _sorted([*keep, *placed])


def wanted_workers(request: ScheduleRequest) -> int:
    """Workers the topology runs on when the cluster has the slots: :func:`worker_count`'s."""
    return worker_count(request.components, request.conf)[0]


def worker_count(components: Iterable[Component], conf: Mapping[str, Any]) -> tuple[int, bool]:
    """Workers for the topology, and whether its topology master runs alone in one of them."""
    hint_sum = sum(len(c.tasks) for c in components if c.id != TOPOLOGY_MASTER)
    total = max(1, min(int(conf.get("topology.workers") or 1), hint_sum))
    has_tm = any(c.id == TOPOLOGY_MASTER and c.tasks for c in components)
    flag = conf.get("topology.master.single.worker")
    tm_alone = has_tm and hint_sum > 0 and (flag is True or (flag is None and total >= TM_ALONE_AT))
    return total + tm_alone, tm_alone


def _sorted(workers: Iterable[WorkerAssignment]) -> list[WorkerAssignment]:
    return sorted(workers, key=lambda w: (w.supervisor_id, w.port))


def _split_old_workers(
    request: ScheduleRequest, all_tasks: set[int]
) -> tuple[list[WorkerAssignment], set[int], set[tuple[str, int]]]:
    """(workers that stay as they are, tasks to place, slots not to reuse this round)."""
    if request.assign_type is AssignType.NEW:
        return [], all_tasks, set()
    alive = {s.id for s in request.supervisors}
    dead = [w for w in request.old_workers if request.dead_tasks.intersection(w.tasks)]
    healthy = [w for w in request.old_workers if w not in dead]
    if request.assign_type is AssignType.REBALANCE:
        keep = [w for w in healthy if w.supervisor_id not in alive]  # unstopped: nobody can restart them
    else:
        keep = healthy
    kept_tasks = {t for w in keep for t in w.tasks}
    excluded = {(w.supervisor_id, w.port) for w in dead} if request.assign_type is AssignType.MONITOR else set()
    return keep, all_tasks - kept_tasks, excluded


def _candidate_supervisors(request: ScheduleRequest) -> list[Supervisor]:
    isolation = request.conf.get("isolation.scheduler.machines")
    supervisors = sorted(request.supervisors, key=lambda s: s.id)
    if not isolation:
        return supervisors
    hosts = set(isolation)
    confined = [s for s in supervisors if s.host in hosts]
    if not confined:
        raise ScheduleError(
            f"topology {request.topology_id}: no live supervisor on the isolation hosts "
            f"{sorted(hosts)} (isolation.scheduler.machines)"
        )
    return confined


def _tasks_of(component_id: str, components: Mapping[str, Component]) -> set[int]:
    return set(components[component_id].tasks) if component_id in components else set()


def _free_ports(
    candidates: list[Supervisor],
    keep: list[WorkerAssignment],
    excluded: set[tuple[str, int]],
    alloc: int,
    conf: Mapping[str, Any],
    topology_id: str,
) -> tuple[dict[str, deque[int]], int]:
    """Free ports per supervisor, and how many workers to allocate on them: ``alloc``, or as many as there are
    free slots when fewer (Storm's rule: a topology runs on the slots there are and grows as slots free up);
    slots that just failed are skipped unless the cluster needs them. None free: a :class:`ScheduleError`."""
    held = {(w.supervisor_id, w.port) for w in keep}

    def free_on(s: Supervisor, skip: set[tuple[str, int]]) -> deque[int]:
        return deque(p for p in sorted(set(s.ports)) if p not in s.used_ports and (s.id, p) not in skip)

    reserve = int(conf.get("jstorm.reserve.workers") or 0)
    free = {s.id: free_on(s, held | excluded) for s in candidates}
    if sum(map(len, free.values())) - reserve < alloc and excluded:
        free = {s.id: free_on(s, held) for s in candidates}
    available = sum(map(len, free.values()))
    if available - reserve < 1:
        where = "on its isolation hosts" if conf.get("isolation.scheduler.machines") else "in the cluster"
        raise ScheduleError(
            f"no free worker slot for topology {topology_id}: needs {alloc}, {available} free {where}"
            + (f", {reserve} reserved (jstorm.reserve.workers)" if reserve else "")
            + "; add supervisors or slots, or kill topologies"
        )
    return free, min(alloc, available - reserve)


def _user_defined_workers(
    conf: Mapping[str, Any], components: Mapping[str, Component], remaining: set[int], mem: int, cpu: int
) -> list[_Worker]:
    """``use.userdefine.assignment``: [{host, port, components: {id: n}, mem, cpu}], placed first.

    Each definition claims the lowest not-yet-claimed task ids of its components; one whose tasks
    are not all waiting for placement (e.g. healthy in monitor mode) is skipped.
    """
    claimed: set[int] = set()
    workers = []
    for i, spec in enumerate(conf.get("use.userdefine.assignment") or []):
        if not isinstance(spec, Mapping) or not isinstance(spec.get("components"), Mapping):
            raise ScheduleError(f"use.userdefine.assignment[{i}] must be a map with 'components': {{id: count}}")
        tasks: list[int] = []
        for component_id, count in sorted(spec["components"].items()):
            if component_id not in components:
                raise ScheduleError(f"use.userdefine.assignment[{i}]: unknown component {component_id!r}")
            free = [t for t in sorted(components[component_id].tasks) if t not in claimed]
            tasks += free[: int(count)]
        claimed.update(tasks)
        if tasks and remaining.issuperset(tasks):
            remaining.difference_update(tasks)
            workers.append(
                _Worker(
                    int(spec.get("mem", mem)),
                    int(spec.get("cpu", cpu)),
                    tasks,
                    host=spec.get("host"),
                    port=spec.get("port"),
                    complete=True,
                )
            )
    return workers


def _reused_workers(old: Iterable[WorkerAssignment], remaining: set[int], mem: int, cpu: int) -> list[_Worker]:
    """``use.old.assignment``: old workers whose tasks all still need a home come back whole."""
    workers = []
    for w in _sorted(old):
        if w.tasks and remaining.issuperset(w.tasks):
            remaining.difference_update(w.tasks)
            workers.append(_Worker(w.mem or mem, w.cpu or cpu, list(w.tasks), host=w.host, port=w.port, complete=True))
    return workers


def _place_workers(
    workers: list[_Worker], candidates: list[Supervisor], free: dict[str, deque[int]], keep: list[WorkerAssignment]
) -> None:
    """Requested slots when free, then spread the rest: below-average supervisors first, round robin."""
    used = {s.id: len(set(s.ports) & s.used_ports) for s in candidates}
    for kept in keep:
        if kept.supervisor_id in used:
            used[kept.supervisor_id] += 1

    def take(w: _Worker, s: Supervisor, port: int | None = None) -> None:
        ports = free[s.id]
        w.port = port if port is not None and port in ports else ports[0]
        ports.remove(w.port)
        w.supervisor = s
        used[s.id] += 1

    for w in workers:
        if w.host is not None:
            on_host = [s for s in candidates if s.host == w.host and free[s.id]]
            s = next((s for s in on_host if s.id == w.supervisor_id), on_host[0] if on_host else None)
            if s is not None:
                take(w, s, w.port)
    rest = deque(w for w in workers if w.supervisor is None)
    if not rest:
        return
    by_free = sorted((s for s in candidates if free[s.id]), key=lambda s: (-len(free[s.id]), s.id))
    average = (sum(used[s.id] for s in by_free) + len(rest)) // max(len(by_free), 1) + 1
    turn, overloaded = deque(by_free), []
    while rest and turn:
        s = turn.popleft()
        if used[s.id] >= average:
            overloaded.append(s)
            continue
        take(rest.popleft(), s)
        if free[s.id]:
            turn.append(s)
    turn = deque(sorted((s for s in overloaded if free[s.id]), key=lambda s: (-len(free[s.id]), s.id)))
    while rest and turn:
        s = turn.popleft()
        take(rest.popleft(), s)
        if free[s.id]:
            turn.append(s)
    if rest:  # the capacity cap makes this unreachable unless a caller bypasses it
        raise ScheduleError(f"{len(rest)} workers could not be placed: no free slots left")


class _TaskPlacer:
    """Step 3: tasks into the placed workers, under the avg/avg+1 pool rule."""

    def __init__(
        self,
        workers: list[_Worker],
        components: Mapping[str, Component],
        task_component: Mapping[int, str],
        tm_alone: bool,
    ) -> None:
        placed = [(w, (w.supervisor.id, w.port)) for w in workers if w.supervisor is not None and w.port is not None]
        self.workers = [w for w, _ in placed]
        self.slot = [slot for _, slot in placed]  # worker -> (supervisor id, port)
        self.components = components
        self.task_component = task_component
        self.tm_alone = tm_alone
        order = {sid: i for i, sid in enumerate(sorted({sid for sid, _ in self.slot}))}
        self.sup = [order[sid] for sid, _ in self.slot]
        self.on_sup: dict[int, list[int]] = defaultdict(list)
        for i, s in enumerate(self.sup):
            self.on_sup[s].append(i)
        # worker -> component -> tasks
        self.count: list[defaultdict[str, int]] = [defaultdict(int) for _ in self.workers]
        self.sup_count: dict[int, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.total = [0] * len(self.workers)
        self.sup_total: dict[int, int] = defaultdict(int)
        for i, w in enumerate(self.workers):
            for t in w.tasks:
                self._count(i, task_component[t])
        self.pool = {i for i, w in enumerate(self.workers) if not w.complete}
        self.related = _related(components)

    def place(self, tasks: list[int], old_slot: Mapping[int, tuple[str, int]]) -> None:
        pending = list(tasks)
        if self.tm_alone:
            pending = self._place_tm_alone(pending)
        self.average, self.left = divmod(len(pending), max(len(self.pool), 1))
        if old_slot:
            slot_worker = {self.slot[i]: i for i in self.pool}
            still = []
            for t in pending:
                i = slot_worker.get(old_slot.get(t, ("", -1)))
                if i is not None and i in self.pool:
                    self._push(i, t)
                else:
                    still.append(t)
            pending = still
        differ: list[int] = []
        system: list[int] = []
        user: list[int] = []
        for t in pending:
            component = self.components[self.task_component[t]]
            (differ if component.conf.get("task.on.differ.node") else system if component.is_system else user).append(t)
        for group, one_per_node in ((differ, True), (system, False), (user, False)):
            for component_id, run in _runs(group, self.task_component):
                self._place_run(component_id, run, one_per_node)

    def _place_tm_alone(self, pending: list[int]) -> list[int]:
        tm_tasks = [t for t in pending if self.task_component[t] == TOPOLOGY_MASTER]
        if not tm_tasks:
            return pending
        empty = [i for i in self.pool if self.total[i] == 0]
        if not empty:
            raise ScheduleError("no empty worker left for the topology master (topology.master.single.worker)")
        per_sup: defaultdict[int, int] = defaultdict(int)
        for i in empty:
            per_sup[self.sup[i]] += 1
        chosen = min(empty, key=lambda i: (-per_sup[self.sup[i]], self.sup[i], self.slot[i][1]))
        for t in tm_tasks:
            self.workers[chosen].tasks.append(t)
            self._count(chosen, TOPOLOGY_MASTER)
        self.pool.discard(chosen)
        return [t for t in pending if t not in tm_tasks]

    def _place_run(self, component_id: str, tasks: list[int], one_per_node: bool) -> None:
        """Tasks of one component: keep a heap of worker keys, refreshed only where a task lands."""
        related = self.related.get(component_id, frozenset())
        use_related = not component_id.startswith("__")

        def key(i: int) -> tuple[int, ...]:
            s = self.sup[i]
            k: tuple[int, ...] = (
                self.count[i][component_id],
                self.sup_count[s][component_id],
                self.total[i],
                self.sup_total[s],
            )
            if use_related:
                k += (-sum(self.count[i][r] for r in related), -sum(self.sup_count[s][r] for r in related))
            return (*k, s, self.slot[i][1])

        version = [0] * len(self.workers)
        heap = [(key(i), 0, i) for i in self.pool]
        heapq.heapify(heap)
        for t in tasks:
            while True:
                if not heap:
                    raise ScheduleError(
                        f"not enough supervisors to put the tasks of {component_id!r} on different nodes "
                        "(task.on.differ.node)"
                        if one_per_node
                        else f"no worker left for task {t} of {component_id!r}"
                    )
                _, v, i = heapq.heappop(heap)
                if (
                    v == version[i]
                    and i in self.pool
                    and not (one_per_node and self.sup_count[self.sup[i]][component_id])
                ):
                    break
            self._push(i, t)
            for j in self.on_sup[self.sup[i]]:
                version[j] += 1
                if j in self.pool:
                    heapq.heappush(heap, (key(j), version[j], j))

    def _count(self, i: int, component_id: str) -> None:
        s = self.sup[i]
        self.count[i][component_id] += 1
        self.sup_count[s][component_id] += 1
        self.total[i] += 1
        self.sup_total[s] += 1

    def _push(self, i: int, task: int) -> None:
        """Give ``task`` to worker ``i``; workers leave the pool once they reach their share."""
        self.workers[i].tasks.append(task)
        self._count(i, self.task_component[task])
        n = self.total[i]
        if self.left <= 0:
            if n >= self.average:
                self.pool.discard(i)
        elif n > self.average:
            self.pool.discard(i)
            self.left -= n - self.average
            if self.left <= 0:
                self.pool -= {j for j in self.pool if self.total[j] >= self.average}


def _related(components: Mapping[str, Component]) -> dict[str, frozenset[str]]:
    """Who a component talks to directly: a bolt's inputs; for a spout, the bolts reading from it."""
    readers: dict[str, set[str]] = defaultdict(set)
    for c in components.values():
        for source in c.inputs:
            readers[source].add(c.id)
    return {c.id: frozenset(c.inputs if c.inputs else readers.get(c.id, ())) for c in components.values()}


def _runs(tasks: list[int], task_component: Mapping[int, str]) -> Iterable[tuple[str, list[int]]]:
    """Consecutive tasks grouped by component, in task-id order."""
    run: list[int] = []
    for t in sorted(tasks):
        if run and task_component[run[-1]] != task_component[t]:
            yield task_component[run[-1]], run
            run = []
        run.append(t)
    if run:
        yield task_component[run[-1]], run
