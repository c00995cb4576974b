"""Gray (canary) upgrade decisions, pure: what to refuse, which workers form the next batch, and when
an upgrade is complete or rolled back. The adapter reads ``/gray_upgrade/<id>`` and the assignment,
calls these, and carries out the :class:`Step` (see :meth:`nimbus.upgrading.Upgrading.coordinate_upgrade`).

How an upgrade runs (reference/jstorm.md §3, with its quirks fixed):

* The new code is a new *code version* stored beside the old one; the assignment's ``code_version``
  stays the old one until the upgrade completes. A worker runs the new version once its ``host:port``
  is marked under ``upgrading_workers``; its supervisor moves the mark to ``upgraded_workers`` only after
  the new process has heartbeated (JStorm marks on relaunch, so a crash-looping version looked upgraded).
* Batches advance only when the operator asks (``gray_upgrade``); a batch is picked when the previous
  one is done. By count, the workers are taken in ``host:port`` order with the topology master's worker
  last: restarting it pauses the task heartbeats nimbus sees, so it goes once the new code has proven
  itself elsewhere. ``-w``/``-p`` pick exactly what the operator names, the master's worker included.
* ``complete_upgrade`` asks for one last batch of every remaining worker, so a topology never keeps
  running two versions after its upgrade ended (JStorm leaves the rest on the old code until restarted).
* Rollback (operator, a task dying, or the upgrade expiring) puts every worker back on the assignment's
  version; it is over when no worker it switched back is still pending. The new version is then dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from squall.core.zk.records import GrayUpgradeConf

ROLLBACK_CMD = "storm rollback"


class UpgradeRefused(ValueError):
    """The request does not fit the upgrade's state; the message says what to do instead."""


@dataclass(frozen=True)
class BatchRequest:
    """Which workers to upgrade next: explicit ``workers`` > ``component`` (at most ``worker_num`` of its
    workers, all when 0) > ``worker_num`` > ``all_remaining``. Nothing set: no batch yet."""

    worker_num: int = 0
    component: str | None = None
    workers: tuple[str, ...] = ()
    all_remaining: bool = False

    def describe(self) -> str:
        if self.workers:
            return f"workers {', '.join(self.workers)}"
        if self.component:
            return f"{self.worker_num or 'all'} workers of component {self.component!r}"
        if self.all_remaining:
            return "every remaining worker"
        return f"{self.worker_num} more workers" if self.worker_num else "no workers yet"


@dataclass(frozen=True)
class UpgradeView:
    """What the coordinator sees of one topology."""

    conf: GrayUpgradeConf
    workers: tuple[str, ...]  # host:port of every assigned worker, in batch order (master's worker last)
    component_workers: Mapping[str, frozenset[str]]  # component → host:ports hosting its tasks
    upgrading: frozenset[str]
    upgraded: frozenset[str]


@dataclass(frozen=True)
class Step:
    """What the daemon must do; all empty: wait."""

    batch: tuple[str, ...] = ()  # mark these upgrading
    back: tuple[str, ...] = ()  # rolling back: move these from upgraded to upgrading, to be switched back
    conf: GrayUpgradeConf | None = None  # write this conf
    complete: bool = False  # every worker runs the new version: make it current, drop the old
    rollback: str = ""  # start rolling back, for this reason
    rolled_back: bool = False  # the rollback is over: drop the new version


def in_progress(conf: GrayUpgradeConf | None) -> TypeGuard[GrayUpgradeConf]:
    return conf is not None and not conf.complete_ms


def start(
    existing: GrayUpgradeConf | None, name: str, request: BatchRequest, *, version: int, now_ms: int, ttl_ms: int
) -> GrayUpgradeConf:
    """The conf of a new upgrade to code ``version``; refused while another one is open."""
    if in_progress(existing):
        doing = "rolling back" if existing.rollback else "in progress"
        raise UpgradeRefused(
            f"a gray upgrade of {name!r} is {doing}; finish it first (storm gray_upgrade / "
            f"storm complete_upgrade / {ROLLBACK_CMD} {name}), then submit the new code"
        )
    return _with_batch(GrayUpgradeConf(expire_ms=now_ms + ttl_ms, version=version), request)


def next_batch(existing: GrayUpgradeConf | None, name: str, request: BatchRequest, *, now_ms: int) -> GrayUpgradeConf:
    """The conf asking for the next batch of the open upgrade; refused when there is none to continue."""
    if existing is None:
        raise UpgradeRefused(
            f"{name!r} has no gray upgrade; start one by submitting the new code with "
            "topology.upgrade=true (storm jar ... -c topology.upgrade=true)"
        )
    if existing.complete_ms:
        how = f"was rolled back ({existing.reason})" if existing.rollback else "is already complete"
        raise UpgradeRefused(
            f"the gray upgrade of {name!r} to code version {existing.version} {how}; "
            "submit the code again with topology.upgrade=true to start a new one"
        )
    if existing.rollback:
        raise UpgradeRefused(f"the gray upgrade of {name!r} is rolling back ({existing.reason}); it cannot continue")
    if now_ms > existing.expire_ms:
        raise UpgradeRefused(
            f"the gray upgrade of {name!r} expired {(now_ms - existing.expire_ms) // 1000}s ago "
            "(topology.upgrade.ttl) and is being rolled back; submit the code again with "
            "topology.upgrade=true to start a new one"
        )
    return _with_batch(existing, request)


def _with_batch(conf: GrayUpgradeConf, request: BatchRequest) -> GrayUpgradeConf:
    asked = bool(request.workers or request.component or request.worker_num or request.all_remaining)
    return replace(
        conf,
        worker_num=request.worker_num,
        component=request.component,
        workers=list(request.workers),
        all_remaining=request.all_remaining,
        continue_upgrade=asked,
    )


def start_rollback(conf: GrayUpgradeConf, reason: str) -> GrayUpgradeConf:
    return replace(conf, rollback=True, reason=reason, continue_upgrade=False)


def ended(conf: GrayUpgradeConf, now_ms: int) -> GrayUpgradeConf:
    return replace(conf, complete_ms=now_ms, continue_upgrade=False)


def next_step(view: UpgradeView, now_ms: int) -> Step:
    """One coordinator round. Marks of workers no longer assigned (moved after a failure) are ignored."""
    conf = view.conf
    if conf.complete_ms:
        return Step()
    assigned = set(view.workers)
    if conf.rollback:
        # An upgraded mark while rolling back is a supervisor's confirmation that crossed the rollback: switch it back.
        back = tuple(sorted(view.upgraded))
        if back or view.upgrading & assigned:
            return Step(back=back)
        return Step(rolled_back=True)
    if now_ms > conf.expire_ms:
        return Step(rollback="it expired: not completed within topology.upgrade.ttl")
    if assigned and assigned <= view.upgraded:
        return Step(complete=True)
    if conf.continue_upgrade and not view.upgrading & assigned:
        remaining = [w for w in view.workers if w not in view.upgraded]
        return Step(batch=pick(conf, remaining, view.component_workers), conf=replace(conf, continue_upgrade=False))
    return Step()


def pick(
    conf: GrayUpgradeConf, remaining: Sequence[str], component_workers: Mapping[str, frozenset[str]]
) -> tuple[str, ...]:
    if conf.workers:
        return tuple(w for w in conf.workers if w in remaining)
    if conf.component:
        hosting = [w for w in remaining if w in component_workers.get(conf.component, frozenset())]
        return tuple(hosting[: conf.worker_num or None])
    if conf.all_remaining:
        return tuple(remaining)
    return tuple(remaining[: conf.worker_num])


def check_request(request: BatchRequest, workers: Sequence[str], components: Sequence[str]) -> None:
    """Refuse names that do not exist, listing what does (a typo must not upgrade nothing silently)."""
    unknown = sorted(set(request.workers) - set(workers))
    if unknown:
        raise UpgradeRefused(f"not workers of this topology: {unknown}; its workers are {sorted(workers)}")
    if request.component is not None and request.component not in components:
        raise UpgradeRefused(f"unknown component {request.component!r}; components are {sorted(components)}")


def shape(system: Any) -> dict[str, tuple[str, int, dict[str, str], dict[str, list[str]]]]:
    """A system topology (Thrift) → component → (kind, tasks, inputs, output streams with their fields)."""
    found = {}
    for kind, components in (("spout", system.spouts or {}), ("bolt", system.bolts or {})):
        for name, component in components.items():
            common = component.common
            inputs = {
                f"{g.componentId}:{g.streamId}": _grouping(grouping) for g, grouping in (common.inputs or {}).items()
            }
            streams = {s: list(info.output_fields) for s, info in (common.streams or {}).items()}
            found[name] = (kind, common.parallelism_hint or 0, inputs, streams)
    return found


def _grouping(grouping: Any) -> str:
    """The grouping's kind and arguments, e.g. ``fields ['key']`` (Thrift unions: one field is set)."""
    return next(
        (k + (f" {v}" if isinstance(v, list) else "") for k, v in sorted(vars(grouping).items()) if v is not None),
        "none",
    )


def shape_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Differences between two ``component → (kind, tasks, inputs, outputs)`` maps, as readable lines."""
    lines = [f"component {c!r} was removed" for c in sorted(set(old) - set(new))]
    lines += [f"component {c!r} was added" for c in sorted(set(new) - set(old))]
    for component in sorted(set(old) & set(new)):
        for what, before, after in zip(
            ("kind", "task count", "inputs", "output streams"), old[component], new[component]
        ):
            if before != after:
                lines.append(f"component {component!r}: {what} {before} → {after}")
    return lines
