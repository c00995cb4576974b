"""Storm's UI REST API JSON, shaped from nimbus's Thrift structs: pure functions, no I/O.

Field names and shapes are Storm 2.x's (its ``STORM-UI-REST-API.md`` and UI helpers), so tools written
against Storm's UI (streamparse's ``sparse stats``, ``worker_uptime``, ``slot_usage``) read Squall's. The numbers
are added up as Storm's UI adds them (:mod:`ui.stats`); latencies and capacity are printed as Storm prints them,
``"%.3f"`` strings.

Nimbus keeps Storm's four windows (:data:`WINDOWS`: the last 10 minutes, 3 hours, 1 day, and all time, made
by :mod:`nimbus.windows`); ``topologyStats``, ``spoutSummary`` and ``boltStats`` list all four, as Storm's do,
and the other tables show the window asked for. What Squall does not know is left out rather than invented:
resources (``schedulerDisplayResource`` is false, as in Storm's default) and a topology's replication count. A
worker's log link (``workerLogLink``, ``errorWorkerLogLink``) opens its log on the logviewer of its host, at
the UI's ``logviewer.port`` (``https://`` at ``logviewer.https.port`` when that is set), as Storm's UI links
them; so do the daemons' own log links (``nimbusLogLink``, a supervisor's ``logLink``:
``/daemonlog?file=nimbus.log`` on the logviewer of the daemon's host). Without a port (or for an error with no
worker) a link is ``""``, Storm's value for "no link".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from squall import STORM_VERSION
from squall.core.local_state import daemon_log_name, worker_log_name
from squall.core.names import is_system
from squall.core.stats import ALL_TIME, WINDOWS
from squall.core.zk.errors import error_summary
from ui.stats import (
    Counts,
    Executed,
    component_kinds,
    executors_by_component,
    is_shown,
    reported_counts,
    stats_numbers,
    task_count,
    topology_numbers,
    weighted,
)

#: Storm's sampling percentage shown when topology debug is off.
DEFAULT_SAMPLING_PCT = 10
#: Storm cuts a component's last error to this many characters on the topology page.
LAST_ERROR_CHARS = 200
NO_LINK = ""


class UnknownComponent(LookupError):
    """The topology has no component of that id; the message names those it has."""


def pretty_uptime(secs: int) -> str:
    """Storm's duration text: every unit from the largest non-zero one down to seconds.

    >>> pretty_uptime(3725), pretty_uptime(600), pretty_uptime(86400), pretty_uptime(0)
    ('1h 2m 5s', '10m 0s', '1d 0h 0m 0s', '0s')
    """
    parts: list[str] = []
    for unit, size in (("s", 60), ("m", 60), ("h", 24)):
        if parts and secs <= 0:
            break
        parts.append(f"{secs % size}{unit}")
        secs //= size
    else:
        if secs > 0:
            parts.append(f"{secs}d")
    return " ".join(reversed(parts))


def window_hint(window: str) -> str:
    """Storm's label for a window: ``"All time"`` or its length as :func:`pretty_uptime` writes it.

    >>> window_hint(":all-time"), window_hint("10800")
    ('All time', '3h 0m 0s')
    """
    return "All time" if window == ALL_TIME else pretty_uptime(int(window))


def float_str(value: float) -> str:
    """Latencies and capacity as Storm sends them: a string with three decimals."""
    return f"{value:.3f}"


def encoded(ident: str) -> str:
    """An id as one URL path segment (Storm's ``encodedId``)."""
    return quote(ident, safe="")


class HttpsPort(int):
    """A logviewer port served over HTTPS (``logviewer.https.port``): its links are ``https://``."""


def logviewer_port_of(conf: Mapping[str, Any]) -> int | None:
    """Where the UI links worker logs: ``logviewer.https.port`` (as an :class:`HttpsPort`) when set, else
    ``logviewer.port``."""
    https = conf.get("logviewer.https.port")
    return HttpsPort(https) if https is not None else conf.get("logviewer.port")


def worker_log_link(logviewer_port: int | None, host: str | None, port: int | None, topology_id: str) -> str:
    """The page of a worker's log on its host's logviewer, or ``""`` (no link) without a logviewer port or a
    worker.

    >>> worker_log_link(8000, "h1", 6700, "wc-1-1700000000")
    'http://h1:8000/api/v1/log?file=wc-1-1700000000-worker-6700.log'
    >>> worker_log_link(HttpsPort(8443), "h1", 6700, "wc-1-1700000000")
    'https://h1:8443/api/v1/log?file=wc-1-1700000000-worker-6700.log'
    """
    if port is None:
        return NO_LINK
    return _logviewer_link(logviewer_port, host, f"/api/v1/log?file={encoded(worker_log_name(topology_id, port))}")


def daemon_log_link(logviewer_port: int | None, host: str | None, daemon: str) -> str:
    """The page of a daemon's own log on its host's logviewer (Storm's ``nimbusLogLink``, a supervisor's
    ``logLink``), or ``""`` without a logviewer port or a host.

    >>> daemon_log_link(8000, "h1", "nimbus"), daemon_log_link(None, "h1", "supervisor")
    ('http://h1:8000/daemonlog?file=nimbus.log', '')
    """
    return _logviewer_link(logviewer_port, host, f"/daemonlog?file={encoded(daemon_log_name(daemon))}")


def _logviewer_link(logviewer_port: int | None, host: str | None, path: str) -> str:
    if not logviewer_port or not host:
        return NO_LINK
    where = f"[{host}]" if ":" in host else host  # an IPv6 address
    scheme = "https" if isinstance(logviewer_port, HttpsPort) else "http"
    return f"{scheme}://{where}:{logviewer_port}{path}"


def operation_body(topology_id: str, operation: str) -> dict[str, str]:
    """What Storm answers to an action that nimbus accepted."""
    return {"topologyOperation": operation, "topologyId": topology_id, "status": "success"}


# -- cluster pages --------------------------------------------------------------------------------


def cluster_summary(cluster: Any) -> dict[str, Any]:
    """``/api/v1/cluster/summary`` from a ``ClusterSummary``; ``nimbusUptime`` is Storm 1.x's key, which
    streamparse's ``sparse stats`` still shows."""
    slots = sum(s.num_workers for s in cluster.supervisors)
    used = sum(s.num_used_workers for s in cluster.supervisors)
    uptime = cluster.nimbus_uptime_secs or 0
    return {
        "stormVersion": STORM_VERSION,
        "user": None,
        "supervisors": len(cluster.supervisors),
        "topologies": len(cluster.topologies),
        "slotsTotal": slots,
        "slotsUsed": used,
        "slotsFree": slots - used,
        "executorsTotal": sum(t.num_executors for t in cluster.topologies),
        "tasksTotal": sum(t.num_tasks for t in cluster.topologies),
        "nimbusUptime": pretty_uptime(uptime),
        "nimbusUptimeSeconds": uptime,
        "schedulerDisplayResource": False,
    }


def supervisor_summary(
    cluster: Any, blacklist: Iterable[str] = (), logviewer_port: int | None = None
) -> dict[str, Any]:
    """``/api/v1/supervisor/summary``: every supervisor with its slots; ``blacklisted`` when nimbus keeps new
    workers off its host; ``logLink``, its log on the logviewer of its host at ``logviewer_port``."""
    banned = set(blacklist)
    return {
        "supervisors": [
            {
                "id": s.supervisor_id,
                "host": s.host,
                "uptime": pretty_uptime(s.uptime_secs),
                "uptimeSeconds": s.uptime_secs,
                "slotsTotal": s.num_workers,
                "slotsUsed": s.num_used_workers,
                "slotsFree": max(0, s.num_workers - s.num_used_workers),
                "version": s.version,
                "blacklisted": s.host in banned,
                "logLink": daemon_log_link(logviewer_port, s.host, "supervisor"),
            }
            for s in cluster.supervisors
        ],
        "schedulerDisplayResource": False,
    }


class UnknownSupervisor(LookupError):
    """No supervisor has that id (or runs on that host); the message names those there are."""


def supervisor_page(
    cluster: Any,
    blacklist: Iterable[str],
    infos: Iterable[Any],
    *,
    supervisor_id: str = "",
    host: str = "",
    logviewer_port: int | None = None,
) -> dict[str, Any]:
    """``/api/v1/supervisor?id=ID`` (or ``?host=HOST``): the supervisor(s) and the workers on their host, from
    the ``ClusterSummary`` and every running topology's ``TopologyInfo``.

    A supervisor's workers are those nimbus says it runs (``supervisorId``); a worker an older nimbus reported
    without one is matched by host. ``sharedHost`` says when other supervisors run on the same host (a dev
    cluster). Raises :class:`UnknownSupervisor` naming the supervisors when none matches.
    """
    rows = supervisor_summary(cluster, blacklist, logviewer_port)["supervisors"]
    chosen = [s for s in rows if (s["id"] == supervisor_id if supervisor_id else s["host"] == host)]
    if not chosen:
        wanted = f"id {supervisor_id!r}" if supervisor_id else f"host {host!r}"
        known = ", ".join(f"{s['id']} ({s['host']})" for s in rows) or "none"
        raise UnknownSupervisor(f"no supervisor has {wanted}; the supervisors are {known}")
    hosts, ids = {s["host"] for s in chosen}, {s["id"] for s in chosen}
    return {
        "supervisors": chosen,
        "workers": [
            w
            for info in infos
            for w in _workers(info, logviewer_port)
            if (w["supervisorId"] in ids if w["supervisorId"] else w["host"] in hosts)
        ],
        "sharedHost": any(s["host"] in hosts for s in rows if s not in chosen),
        "schedulerDisplayResource": False,
    }


def nimbus_summary(cluster: Any, logviewer_port: int | None = None) -> dict[str, Any]:
    """``/api/v1/nimbus/summary``: every nimbus that registered, the leader first, each with ``nimbusLogLink``, its
    log on the logviewer of its host at ``logviewer_port``."""
    return {
        "nimbuses": [
            {
                "host": n.host,
                "port": n.port,
                "status": "Leader" if n.isLeader else "Not a Leader",
                "version": n.version,
                "nimbusUpTime": pretty_uptime(n.uptime_secs),
                "nimbusUpTimeSeconds": n.uptime_secs,
                "nimbusLogLink": daemon_log_link(logviewer_port, n.host, "nimbus"),
            }
            for n in cluster.nimbuses
        ]
    }


def topology_summary(cluster: Any) -> dict[str, Any]:
    """``/api/v1/topology/summary``: one entry per topology nimbus knows, as Storm's topology table."""
    return {
        "topologies": [
            {
                "id": t.id,
                "encodedId": encoded(t.id),
                "name": t.name,
                "owner": t.owner,
                "status": t.status,
                "uptime": pretty_uptime(t.uptime_secs),
                "uptimeSeconds": t.uptime_secs,
                "tasksTotal": t.num_tasks,
                "workersTotal": t.num_workers,
                "executorsTotal": t.num_executors,
                "schedulerInfo": t.sched_status,
            }
            for t in cluster.topologies
        ],
        "schedulerDisplayResource": False,
    }


# -- stats as Storm's JSON writes them ------------------------------------------------------------


#: The stats Storm prints as ``"%.3f"`` strings (milliseconds, or a share for capacity).
FORMATTED_STATS = ("completeLatency", "executeLatency", "processLatency", "capacity")


def _stats_row(parts: list[Executed], spout: bool, sys: bool) -> dict[str, Any]:
    """:func:`stats_numbers` as Storm's JSON writes them."""
    return {
        stat: float_str(value) if stat in FORMATTED_STATS else value
        for stat, value in stats_numbers(parts, spout, sys).items()
    }


def _error(error: Any, info: Any, now_secs: int, logviewer_port: int | None, *, last: bool) -> dict[str, Any]:
    """An error's fields; its summary (``lastErrorSummary``, ``errorSummary``: Squall's) is the exception's line
    (:func:`~squall.core.zk.errors.error_summary`), taken from the whole text, so a cut ``lastError`` keeps it."""
    key, text = ("lastError", error.error[:LAST_ERROR_CHARS]) if last else ("error", error.error)
    return {
        key: text,
        f"{key}Summary": error_summary(error.error),
        "errorTime": error.error_time_secs,
        "errorHost": error.host or "",
        "errorPort": error.port,
        "errorWorkerLogLink": worker_log_link(logviewer_port, error.host, error.port, info.id),
        "errorLapsedSecs": max(0, now_secs - error.error_time_secs),
    }


def _last_error(errors: list[Any], info: Any, now_secs: int, logviewer_port: int | None) -> dict[str, Any]:
    """Storm's last-error fields of a component: the newest error, or empty values when there is none."""
    if not errors:
        return {
            "lastError": "",
            "lastErrorSummary": "",
            "errorTime": None,
            "errorHost": "",
            "errorPort": None,
            "errorWorkerLogLink": NO_LINK,
            "errorLapsedSecs": None,
        }
    return _error(max(errors, key=lambda e: e.error_time_secs), info, now_secs, logviewer_port, last=True)


def last_errors(info: Any, *, now_secs: int, logviewer_port: int | None = None) -> list[dict[str, Any]]:
    """The topology page's last errors: each component's newest (its last-error fields, and its whole text as
    ``traceback``), by component. System components' too, whatever ``sys``: nimbus files the topology's own errors
    (a worker it restarted, a failed rebalance) under the topology master."""
    return [
        {
            "component": component,
            **_last_error(list(errors), info, now_secs, logviewer_port),
            "traceback": max(errors, key=lambda e: e.error_time_secs).error,
        }
        for component, errors in sorted((info.errors or {}).items())
        if errors
    ]


def _window_fields(window: str) -> dict[str, str]:
    return {"window": window, "windowPretty": window_hint(window)}


# -- topology page ----------------------------------------------------------------------------------


def topology_page(
    info: Any,
    topology: Any,
    conf: Mapping[str, Any],
    *,
    now_secs: int,
    window: str = ALL_TIME,
    sys: bool = False,
    logviewer_port: int | None = None,
) -> dict[str, Any]:
    """``/api/v1/topology/<id>`` from nimbus's ``TopologyInfo``, the running topology (system components
    included) and its conf; log links go to the logviewers on ``logviewer_port``.

    Every component of the topology is listed, with zero counts until its executors report.
    """
    kinds = component_kinds(topology)
    grouped = executors_by_component(info, window)
    shown = sorted(c for c in kinds if sys or not is_system(c))
    spouts = [c for c in shown if kinds[c] == "spout"]
    every_part = [p for parts in grouped.values() for p in parts]
    return {
        "id": info.id,
        "encodedId": encoded(info.id),
        "name": info.name,
        "owner": info.owner,
        "user": None,
        "status": info.status,
        "uptime": pretty_uptime(info.uptime_secs),
        "uptimeSeconds": info.uptime_secs,
        "tasksTotal": task_count(every_part),
        "executorsTotal": len(info.executors),
        "workersTotal": len({(e.host, e.port) for e in info.executors}),
        "schedulerInfo": info.sched_status,
        "msgTimeout": conf.get("topology.message.timeout.secs"),
        "window": window,
        "windowHint": window_hint(window),
        "topologyStats": [_topology_stats(info, kinds, w, sys) for w in WINDOWS],
        "spouts": [_component_row(c, grouped.get(c, []), "spout", info, sys, now_secs, logviewer_port) for c in spouts],
        "bolts": [
            _component_row(c, grouped.get(c, []), "bolt", info, sys, now_secs, logviewer_port)
            for c in shown
            if kinds[c] == "bolt"
        ],
        "workers": _workers(info, logviewer_port),
        "configuration": dict(conf),
        "debug": False,
        "samplingPct": DEFAULT_SAMPLING_PCT,
        "schedulerDisplayResource": False,
    }


def _topology_stats(info: Any, kinds: Mapping[str, str], window: str, sys: bool) -> dict[str, Any]:
    """A line of the topology's stats: its totals in one window."""
    totals = topology_numbers(executors_by_component(info, window), kinds, sys)
    return {**_window_fields(window), **totals, "completeLatency": float_str(totals["completeLatency"])}


def _component_row(
    component: str, parts: list[Executed], kind: str, info: Any, sys: bool, now_secs: int, logviewer_port: int | None
) -> dict[str, Any]:
    """A line of the topology page's spouts or bolts table."""
    ids = (
        {"spoutId": component, "encodedSpoutId": encoded(component)}
        if kind == "spout"
        else {"boltId": component, "encodedBoltId": encoded(component)}
    )
    return {
        **ids,
        "executors": len(parts),
        "tasks": task_count(parts),
        **_stats_row(parts, kind == "spout", sys),
        **_last_error(list((info.errors or {}).get(component, [])), info, now_secs, logviewer_port),
    }


def _workers(info: Any, logviewer_port: int | None) -> list[dict[str, Any]]:
    """One entry per worker (host, port) running the topology's executors; its uptime is its oldest task's."""
    workers: dict[tuple[str, int], list[Any]] = {}
    for e in info.executors:
        workers.setdefault((e.host, e.port), []).append(e)
    result = []
    for (host, port), executors in sorted(workers.items()):
        per_component: dict[str, int] = {}
        for e in executors:
            per_component[e.component_id] = per_component.get(e.component_id, 0) + 1
        uptime = max(e.uptime_secs for e in executors)
        result.append(
            {
                "supervisorId": executors[0].supervisor_id or "",
                "host": host,
                "port": port,
                "topologyId": info.id,
                "topologyName": info.name,
                "executorsTotal": len(executors),
                "componentNumTasks": per_component,
                "uptime": pretty_uptime(uptime),
                "uptimeSeconds": uptime,
                "workerLogLink": worker_log_link(logviewer_port, host, port, info.id),
            }
        )
    return result


# -- component page ---------------------------------------------------------------------------------


def component_page(
    info: Any,
    topology: Any,
    component: str,
    *,
    now_secs: int,
    window: str = ALL_TIME,
    sys: bool = False,
    logviewer_port: int | None = None,
) -> dict[str, Any]:
    """``/api/v1/topology/<id>/component/<component>``: the component's stats in each window
    (``spoutSummary`` or ``boltStats``), and in the window asked for per stream (and per input for a bolt) and
    per executor, and its errors, oldest first.

    Raises :class:`UnknownComponent` naming the topology's components when it has no ``component``.
    """
    kinds = component_kinds(topology)
    if component not in kinds:
        raise UnknownComponent(
            f"topology {info.id} has no component {component!r}; its components are "
            f"{', '.join(sorted(c for c in kinds if not is_system(c)))}"
        )
    kind = kinds[component]
    parts = executors_by_component(info, window).get(component, [])
    reported = reported_counts(parts)
    errors = sorted((info.errors or {}).get(component, []), key=lambda e: e.error_time_secs)
    page: dict[str, Any] = {
        "id": component,
        "encodedId": encoded(component),
        "name": info.name,
        "topologyId": info.id,
        "encodedTopologyId": encoded(info.id),
        "topologyStatus": info.status,
        "componentType": kind,
        "user": None,
        "executors": len(parts),
        "tasks": task_count(parts),
        "window": window,
        "windowHint": window_hint(window),
        "debug": False,
        "samplingPct": DEFAULT_SAMPLING_PCT,
        "profilingAndDebuggingCapable": False,
        "profileActionEnabled": False,
        "profilerActive": [],
        "schedulerDisplayResource": False,
        "componentErrors": [_error(e, info, now_secs, logviewer_port, last=False) for e in errors],
        "executorStats": [
            _executor_row(p, info, kind == "spout", sys, logviewer_port)
            for p in sorted(parts, key=lambda p: p.summary.executor_info.task_start)
        ],
        "outputStats": _output_stats(reported, kind == "spout", sys),
        "userMetrics": user_metrics(parts),
    }
    summary = [
        {**_window_fields(w), **_stats_row(executors_by_component(info, w).get(component, []), kind == "spout", sys)}
        for w in WINDOWS
    ]
    if kind == "spout":
        last_error = _last_error(errors, info, now_secs, None)["lastError"]
        page["spoutSummary"] = [{**row, "lastError": last_error} for row in summary]
    else:
        page["boltStats"] = summary
        page["inputStats"] = _input_stats(reported, sys)
    return page


def user_metrics(parts: Iterable[Executed]) -> list[dict[str, Any]]:
    """The user metrics (:mod:`squall.api.metrics`) of a component's executors as of their latest heartbeats, one
    entry per task and name, by task then name: ``type`` is ``"counter"`` (a count since the task started) or
    ``"gauge"`` (a value)."""
    rows = []
    for part in sorted(parts, key=lambda p: p.summary.executor_info.task_start):
        e, stats = part.summary, part.summary.stats
        if stats is None:
            continue
        values = [(name, "counter", v) for name, v in (stats.user_counters or {}).items()]
        values += [(name, "gauge", v) for name, v in (stats.user_gauges or {}).items()]
        rows += [
            {"task": part.task, "host": e.host, "port": e.port, "name": name, "type": kind, "value": value}
            for name, kind, value in sorted(values)
        ]
    return rows


def _executor_row(part: Executed, info: Any, spout: bool, sys: bool, logviewer_port: int | None) -> dict[str, Any]:
    e = part.summary
    ident = f"[{e.executor_info.task_start}-{e.executor_info.task_end}]"
    return {
        "id": ident,
        "encodedId": encoded(ident),
        "host": e.host,
        "port": e.port,
        "uptime": pretty_uptime(e.uptime_secs),
        "uptimeSeconds": e.uptime_secs,
        "workerLogLink": worker_log_link(logviewer_port, e.host, e.port, info.id),
        **_stats_row([part], spout, sys),
    }


def _output_stats(reported: list[Counts], spout: bool, sys: bool) -> list[dict[str, Any]]:
    """One row per output stream: emitted and transferred; a spout's also what its trees did."""
    streams = sorted(
        {s for c in reported for s in (*c.emitted, *c.transferred, *(c.acked if spout else ())) if is_shown(s, sys)}
    )
    rows = []
    for stream in streams:
        row: dict[str, Any] = {
            "stream": stream,
            "emitted": sum(c.emitted.get(stream, 0) for c in reported),
            "transferred": sum(c.transferred.get(stream, 0) for c in reported),
        }
        if spout:
            row.update(
                {
                    "acked": sum(c.acked.get(stream, 0) for c in reported),
                    "failed": sum(c.failed.get(stream, 0) for c in reported),
                    "completeLatency": float_str(
                        weighted((c.latency_ms.get(stream, 0.0), c.acked.get(stream, 0)) for c in reported)
                    ),
                }
            )
        rows.append(row)
    return rows


def _input_stats(reported: list[Counts], sys: bool) -> list[dict[str, Any]]:
    """One row per input (component, stream) of a bolt."""
    inputs = sorted(
        {k for c in reported for k in (*c.executed, *c.acked, *c.failed) if isinstance(k, tuple) and is_shown(k, sys)}
    )  # a bolt's: keyed by (component, stream)
    rows = []
    for component, stream in inputs:
        key = (component, stream)
        rows.append(
            {
                "component": component,
                "encodedComponentId": encoded(component),
                "stream": stream,
                "executed": sum(c.executed.get(key, 0) for c in reported),
                "acked": sum(c.acked.get(key, 0) for c in reported),
                "failed": sum(c.failed.get(key, 0) for c in reported),
                "executeLatency": float_str(
                    weighted((c.latency_ms.get(key, 0.0), c.executed.get(key, 0)) for c in reported)
                ),
                "processLatency": float_str(
                    weighted((c.process_ms.get(key, 0.0), c.acked.get(key, 0)) for c in reported)
                ),
            }
        )
    return rows
