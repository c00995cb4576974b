"""The UI's OpenAPI document fuzzed against the app (schemathesis): no request the document allows gets a 5xx.

The app runs in-process (ASGI) in front of a real nimbus holding a submitted word count whose tasks have
reported stats through nimbus's heartbeat path (no worker processes: the fuzzing is about the UI and what
nimbus answers it). Generated topology ids mostly name no topology, so a share of the requests use the real
topology's id and component names instead, to reach the code that shapes stats (kill is left to random ids:
it would end the topology for the rest of the run)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from examples import wordcount
from minicluster import MiniCluster
from squall.core.zk import paths
from squall.core.zk.records import ComponentType, TaskBeat, TaskStats, TopologyTasks
from ui.app import create_app
from ui.openapi import document

#: Requests per operation: the whole run stays around a few seconds of CPU.
EXAMPLES = 30


@pytest.fixture
def cluster(zk_conf: dict[str, Any], tmp_path: Path) -> Iterator[MiniCluster]:
    with ExitStack() as stack:
        yield MiniCluster(zk_conf, tmp_path, stack)


def report_stats(cluster: MiniCluster, topology_id: str) -> list[str]:
    """Every task beats once with stats, as its topology master would report it; the components' names."""
    tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
    assert tasks is not None
    spout = TaskStats(emitted={"default": 9}, transferred={"default": 9}, acked={"default": 8},
                      failed={"default": 1}, latency_ms={"default": 3.0})
    bolt = TaskStats(emitted={"default": 5}, transferred={"default": 5}, acked={"sentences:default": 5},
                     executed={"sentences:default": 5}, latency_ms={"sentences:default": 0.5})
    cluster.nimbus.watching.heartbeat(topology_id, {
        task: TaskBeat(0, 700, spout if info.type is ComponentType.SPOUT else bolt)
        for task, info in tasks.tasks.items()})
    return sorted({info.component for info in tasks.tasks.values()})


@pytest.mark.slow  # about 20 s: 30 requests per operation, each a fresh Thrift connection to nimbus
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")  # schemathesis's own strategies
def test_no_request_the_openapi_document_allows_gets_a_server_error(cluster: MiniCluster) -> None:
    topology_id = cluster.submit(wordcount.topology(workers=2))
    components = report_stats(cluster, topology_id)
    app = create_app({**cluster.conf, "nimbus.seeds": [f"127.0.0.1:{cluster.nimbus.port}"],
                      "ui.nimbus.timeout.secs": 10})
    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    documented = {f"{method.upper()} {path}" for path, methods in document()["paths"].items() for method in methods}
    assert {operation.label for operation in operations} == documented - {"GET /api/v1/openapi.json"}, \
        "every operation but the document's own, which schemathesis leaves out"

    for operation in operations:
        real_id = st.just(topology_id) if "kill" not in operation.path else st.nothing()

        @given(case=operation.as_strategy(), use_id=st.one_of(st.none(), real_id),
               component=st.sampled_from(components))
        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                         HealthCheck.function_scoped_fixture])
        def fuzz(case: Any, use_id: str | None, component: str) -> None:
            if use_id is not None and "id" in (case.path_parameters or {}):
                case.path_parameters["id"] = use_id
                if "component" in case.path_parameters:
                    case.path_parameters["component"] = component
            case.call_and_validate(checks=[not_a_server_error])

        fuzz()
