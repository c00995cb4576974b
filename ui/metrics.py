"""Prometheus ``/metrics`` on the UI daemon: the cluster, its topologies, their components and tasks, read
from nimbus on every scrape.

There is no polling thread and no state: a scrape asks nimbus what the REST API asks it (through
:class:`ui.source.NimbusSource`, each wait bounded by ``ui.nimbus.timeout.secs``) and turns the answer into
metric families with the REST API's own arithmetic (:mod:`ui.stats`), so ``/metrics`` and ``/api/v1/...``
never disagree.
While nimbus cannot be reached the scrape still answers, with ``squall_up 0`` alone.

User metrics (:mod:`squall.api.metrics`) are ``squall_user_counter_total`` and ``squall_user_gauge``, labelled
with the metric's ``name`` beside its task's labels; failures by reason ``squall_component_failures_total``
(and ``_task_``, ``_topology_``) with a ``reason`` label: ``timeout``, ``explicit``, ``exception``.

Counts are nimbus's ``:all-time`` window (since each task started), exposed as counters (``_total``): a
restarted task starts again from 0, which Prometheus's ``rate()`` reads as a counter reset. Latencies are
gauges in seconds (Prometheus's unit; Storm's UI shows milliseconds), capacity a gauge (1: always busy).
System components and streams (``__acker``, ``__ack_ack``, ticks) are left out, as the REST API leaves
them out by default. Labels: ``topology`` (the name, stable across resubmits), ``component``, and for a
task ``task``, ``host`` and ``port`` (its worker).

    curl http://localhost:8080/metrics
    # rate(squall_component_executed_total{topology="wordcount"}[1m])   tuples per second per bolt
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import structlog
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from squall.core.names import is_system
from squall.core.stats import ALL_TIME
from ui import shapes
from ui.pages import Ask
from ui.source import NimbusSource, NimbusUnreachable
from ui.stats import REASON_STATS, executors_by_component, stats_numbers, topology_numbers

log = structlog.get_logger(__name__)

PREFIX = "squall"
#: Counted stats: :func:`ui.stats.stats_numbers`' name → what the counter counts (tasks or components).
COUNTED = {
    "emitted": "tuples emitted on user streams",
    "transferred": "tuples sent to other tasks on user streams",
    "acked": "tuple trees completed (a spout) or inputs acked (a bolt)",
    "failed": "tuple trees failed or timed out (a spout) or inputs failed (a bolt)",
    "executed": "inputs executed (a bolt)",
}
#: Timed stats: its name (milliseconds) → metric name (seconds) and what it is.
TIMED = {
    "completeLatency": ("complete_latency_seconds", "mean time from a spout's emit to its tree's ack"),
    "executeLatency": ("execute_latency_seconds", "mean time a bolt spends in execute"),
    "processLatency": ("process_latency_seconds", "mean time from a bolt's input to its ack"),
}
#: ``failedTimeout``... (:data:`ui.stats.REASON_STATS`' names) → the ``reason`` label of ``*_failures_total``.
REASONS = {name: reason for reason, name in REASON_STATS.items()}
FAILURES = (
    "tuples failed by reason: timeout (a spout's tree timed out), explicit (a bolt called fail; at a spout, "
    "a bolt failed the tree) or exception (a bolt's execute raised)"
)
USER_LABELS = ("topology", "component", "task", "host", "port", "name")
UP = "1 when nimbus answered this scrape, 0 when it could not be reached"
CAPACITY = "share of its uptime a bolt spent executing (its busiest task, for a component): near 1, it cannot keep up"

COMPONENT_LABELS = ("topology", "component")
TASK_LABELS = ("topology", "component", "task", "host", "port")


class _Families:
    """The scrape's metric families by name, made on first use so each is declared once."""

    def __init__(self) -> None:
        self.by_name: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}

    def add(
        self,
        kind: type[CounterMetricFamily | GaugeMetricFamily],
        name: str,
        doc: str,
        labels: Sequence[str],
        values: Sequence[str],
        value: float,
    ) -> None:
        family = self.by_name.get(name)
        if family is None:
            family = self.by_name[name] = kind(f"{PREFIX}_{name}", doc, labels=list(labels))
        family.add_metric(list(values), value)

    def stats(self, level: str, labels: Sequence[str], values: Sequence[str], numbers: dict[str, float]) -> None:
        """One task's or component's :func:`ui.stats_numbers` as counters and gauges."""
        for stat, value in numbers.items():
            if stat in COUNTED:
                self.add(
                    CounterMetricFamily,
                    f"{level}_{stat}",
                    f"{COUNTED[stat]}, since each task started",
                    labels,
                    values,
                    value,
                )
            elif stat in REASONS:
                self.add(
                    CounterMetricFamily,
                    f"{level}_failures",
                    f"{FAILURES}, since each task started",
                    (*labels, "reason"),
                    (*values, REASONS[stat]),
                    value,
                )
            elif stat in TIMED:
                name, doc = TIMED[stat]
                self.add(GaugeMetricFamily, f"{level}_{name}", doc, labels, values, value / 1000)
            else:
                self.add(GaugeMetricFamily, f"{level}_capacity", CAPACITY, labels, values, value)


def families(cluster: Any, blacklist: Iterable[str], infos: Iterable[Any]) -> list[Metric]:
    """Every metric family of one scrape, from nimbus's ``ClusterSummary``, its blacklist and the running
    topologies' ``TopologyInfo`` (what :meth:`ui.source.NimbusSource.cluster_with_topologies` returns).

    >>> from squall.core.thrift import storm
    >>> [m.name for m in families(storm.ClusterSummary(supervisors=[], topologies=[], nimbuses=[]), [], [])][:3]
    ['squall_up', 'squall_supervisors', 'squall_slots']
    """
    out = _Families()
    gauge = GaugeMetricFamily
    out.add(gauge, "up", UP, (), (), 1)
    out.add(gauge, "supervisors", "supervisors registered", (), (), len(cluster.supervisors))
    slots = {
        "used": sum(s.num_used_workers for s in cluster.supervisors),
        "free": sum(max(0, s.num_workers - s.num_used_workers) for s in cluster.supervisors),
    }
    for state, n in slots.items():
        out.add(gauge, "slots", "worker slots of all supervisors, used or free", ("state",), (state,), n)
    for s in cluster.supervisors:
        for state, n in (("used", s.num_used_workers), ("free", max(0, s.num_workers - s.num_used_workers))):
            out.add(
                gauge,
                "supervisor_slots",
                "a supervisor's worker slots, used or free",
                ("supervisor", "host", "state"),
                (s.supervisor_id, s.host, state),
                n,
            )
    out.add(gauge, "blacklisted_hosts", "hosts nimbus keeps new workers off", (), (), len(set(blacklist)))
    for status, n in sorted(Counter(t.status for t in cluster.topologies).items()):
        out.add(gauge, "topologies", "topologies by status", ("status",), (status,), n)
    for t in cluster.topologies:
        out.add(
            gauge,
            "topology_info",
            "a running topology: its id, status and owner",
            ("topology", "topology_id", "status", "owner"),
            (t.name, t.id, t.status, t.owner or ""),
            1,
        )
        for what, n in (
            ("uptime_seconds", t.uptime_secs),
            ("workers", t.num_workers),
            ("executors", t.num_executors),
            ("tasks", t.num_tasks),
        ):
            out.add(gauge, f"topology_{what}", f"a topology's {what.replace('_', ' ')}", ("topology",), (t.name,), n)
    for info in infos:
        _topology(out, info)
    return list(out.by_name.values())


def _topology(out: _Families, info: Any) -> None:
    grouped = executors_by_component(info, ALL_TIME)
    kinds = {
        component: "spout" if any(p.counts.spout for p in parts if p.counts) else "bolt"
        for component, parts in grouped.items()
        if any(p.counts for p in parts)
    }
    totals = topology_numbers(grouped, kinds, False)
    for stat, value in totals.items():
        if stat in COUNTED:
            out.add(
                CounterMetricFamily,
                f"topology_{stat}",
                f"{COUNTED[stat]} by the topology's components "
                "(acked and failed: its spouts' trees), since each task started",
                ("topology",),
                (info.name,),
                value,
            )
    out.add(
        GaugeMetricFamily,
        "topology_complete_latency_seconds",
        TIMED["completeLatency"][1],
        ("topology",),
        (info.name,),
        totals["completeLatency"] / 1000,
    )
    for stat, reason in REASONS.items():
        out.add(
            CounterMetricFamily,
            "topology_failures",
            f"{FAILURES}: the spouts' trees, since each task started",
            ("topology", "reason"),
            (info.name, reason),
            totals[stat],
        )
    for component, kind in sorted(kinds.items()):
        if is_system(component):
            continue
        parts = grouped[component]
        out.stats("component", COMPONENT_LABELS, (info.name, component), stats_numbers(parts, kind == "spout", False))
        for part in parts:
            if part.counts is not None:
                e = part.summary
                out.stats(
                    "task",
                    TASK_LABELS,
                    (info.name, component, part.task, e.host, str(e.port)),
                    stats_numbers([part], kind == "spout", False),
                )
        for m in shapes.user_metrics(parts):
            labels = (info.name, component, m["task"], m["host"], str(m["port"]), m["name"])
            if m["type"] == "counter":
                out.add(
                    CounterMetricFamily,
                    "user_counter",
                    "a user counter (TopologyContext.register_counter, a "
                    "meter's count, a histogram's NAME.count), since its task started",
                    USER_LABELS,
                    labels,
                    m["value"],
                )
            else:
                out.add(
                    GaugeMetricFamily,
                    "user_gauge",
                    "a user gauge (TopologyContext.register_gauge, a "
                    "histogram's NAME.min/max/mean/p50/p95/p99) at its task's latest heartbeat",
                    USER_LABELS,
                    labels,
                    m["value"],
                )


class ClusterCollector:
    """A Prometheus collector that asks nimbus on every ``collect()``::

    from prometheus_client import generate_latest
    print(generate_latest(ClusterCollector(NimbusSource(conf))).decode())
    """

    def __init__(self, source: NimbusSource) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        try:
            cluster, blacklist, infos = self.source.cluster_with_topologies()
        except NimbusUnreachable as exc:
            log.warning("metrics scrape without nimbus", error=str(exc))
            yield GaugeMetricFamily(f"{PREFIX}_up", UP, value=0)
            return
        yield from families(cluster, blacklist, infos)


def route(source: NimbusSource, ask: Ask) -> Route:
    """``GET /metrics`` in the format the scraper asks for (Prometheus text, or OpenMetrics), encoded on a
    worker thread: nimbus is asked while it encodes."""
    collector = ClusterCollector(source)

    async def metrics(request: Request) -> Response:
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(await ask(encode, collector), media_type=content_type)

    return Route("/metrics", metrics, include_in_schema=False)
