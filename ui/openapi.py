"""The OpenAPI 3.1 description of the UI's REST API, served at ``/api/v1/openapi.json``.

Written out here rather than generated, so it states Storm's JSON shapes (camelCase keys, latencies as
``"%.3f"`` strings) that a framework's models would not; the tests hold it to the truth: its paths are
exactly the app's routes, and real responses from a running word count validate against its schemas.
Objects list the keys Squall always sends as required and allow more (Storm adds keys over releases).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from squall import __version__
from squall.core.stats import ALL_TIME, WINDOWS

STRING: dict[str, Any] = {"type": "string"}
INTEGER: dict[str, Any] = {"type": "integer"}
NUMBER: dict[str, Any] = {"type": "number"}
BOOLEAN: dict[str, Any] = {"type": "boolean"}
DECIMAL: dict[str, Any] = {"type": "string", "pattern": r"^\d+\.\d{3}$", "description": "a number, 3 decimals"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "type": [schema["type"], "null"]}


def obj(**properties: Any) -> dict[str, Any]:
    """An object whose listed keys are all present (more may be)."""
    return {"type": "object", "required": sorted(properties), "properties": properties}


def array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


UPTIME = {"uptime": STRING, "uptimeSeconds": INTEGER}
WINDOW = {"window": STRING, "windowPretty": STRING}
#: Squall's split of ``failed`` by reason; they add up to ``failed`` (ticks and system inputs included).
FAILED_BY_REASON = {
    "failedTimeout": {**INTEGER, "description": "a spout's trees that timed out (topology.message.timeout.secs)"},
    "failedExplicit": {
        **INTEGER,
        "description": "a bolt's inputs it failed by calling fail; a spout's trees a "
        "bolt failed (by fail or an exception in execute)",
    },
    "failedException": {**INTEGER, "description": "a bolt's inputs failed because execute raised"},
}
COUNTS = {"emitted": INTEGER, "transferred": INTEGER, "acked": INTEGER, "failed": INTEGER, **FAILED_BY_REASON}
BOLT_COUNTS = {**COUNTS, "executed": INTEGER, "executeLatency": DECIMAL, "processLatency": DECIMAL, "capacity": DECIMAL}
SPOUT_COUNTS = {**COUNTS, "completeLatency": DECIMAL}
SUMMARY = {**STRING, "description": "the error's line: a traceback's exception (type: message), else its first line"}
LAST_ERROR = {
    "lastError": STRING,
    "lastErrorSummary": SUMMARY,
    "errorHost": STRING,
    "errorPort": nullable(INTEGER),
    "errorTime": nullable(INTEGER),
    "errorLapsedSecs": nullable(INTEGER),
    "errorWorkerLogLink": STRING,
}

SCHEMAS: dict[str, Any] = {
    "Error": obj(error={**STRING, "examples": ["404 Not Found"]}, errorMessage=STRING),
    "Operation": obj(topologyOperation=STRING, topologyId=STRING, status={"const": "success"}),
    "Configuration": {"type": "object", "description": "the leader nimbus's conf, secrets masked"},
    "ClusterSummary": obj(
        stormVersion=STRING,
        supervisors=INTEGER,
        topologies=INTEGER,
        slotsTotal=INTEGER,
        slotsUsed=INTEGER,
        slotsFree=INTEGER,
        executorsTotal=INTEGER,
        tasksTotal=INTEGER,
        nimbusUptime=STRING,
        nimbusUptimeSeconds=INTEGER,
        schedulerDisplayResource=BOOLEAN,
    ),
    "NimbusSummary": obj(
        nimbuses=array(
            obj(
                host=STRING,
                port=INTEGER,
                status={"enum": ["Leader", "Not a Leader"]},
                version=STRING,
                nimbusUpTime=STRING,
                nimbusUpTimeSeconds=INTEGER,
                nimbusLogLink=STRING,
            )
        )
    ),
    "SupervisorRow": obj(
        id=STRING,
        host=STRING,
        **UPTIME,
        slotsTotal=INTEGER,
        slotsUsed=INTEGER,
        slotsFree=INTEGER,
        version=STRING,
        blacklisted=BOOLEAN,
        logLink=STRING,
    ),
    "SupervisorSummary": obj(schedulerDisplayResource=BOOLEAN, supervisors=array(ref("SupervisorRow"))),
    "Supervisor": obj(
        schedulerDisplayResource=BOOLEAN,
        sharedHost=BOOLEAN,
        supervisors=array(ref("SupervisorRow")),
        workers=array(ref("Worker")),
    ),
    "TopologySummary": obj(
        schedulerDisplayResource=BOOLEAN,
        topologies=array(
            obj(
                id=STRING,
                encodedId=STRING,
                name=STRING,
                owner=nullable(STRING),
                status=STRING,
                **UPTIME,
                tasksTotal=INTEGER,
                workersTotal=INTEGER,
                executorsTotal=INTEGER,
                schedulerInfo=nullable(STRING),
            )
        ),
    ),
    "Worker": obj(
        supervisorId=STRING,
        host=STRING,
        port=INTEGER,
        topologyId=STRING,
        topologyName=STRING,
        executorsTotal=INTEGER,
        componentNumTasks={"type": "object", "additionalProperties": INTEGER},
        **UPTIME,
        workerLogLink=STRING,
    ),
    "Topology": obj(
        id=STRING,
        encodedId=STRING,
        name=STRING,
        owner=nullable(STRING),
        status=STRING,
        **UPTIME,
        tasksTotal=INTEGER,
        workersTotal=INTEGER,
        executorsTotal=INTEGER,
        schedulerInfo=nullable(STRING),
        msgTimeout=NUMBER,
        window=STRING,
        windowHint=STRING,
        debug=BOOLEAN,
        samplingPct=NUMBER,
        schedulerDisplayResource=BOOLEAN,
        configuration={"type": "object"},
        topologyStats=array(obj(**WINDOW, **SPOUT_COUNTS)),
        spouts=array(
            obj(spoutId=STRING, encodedSpoutId=STRING, executors=INTEGER, tasks=INTEGER, **SPOUT_COUNTS, **LAST_ERROR)
        ),
        bolts=array(
            obj(boltId=STRING, encodedBoltId=STRING, executors=INTEGER, tasks=INTEGER, **BOLT_COUNTS, **LAST_ERROR)
        ),
        workers=array(ref("Worker")),
    ),
    "Component": {
        **obj(
            id=STRING,
            encodedId=STRING,
            name=STRING,
            topologyId=STRING,
            encodedTopologyId=STRING,
            topologyStatus=STRING,
            componentType={"enum": ["spout", "bolt"]},
            executors=INTEGER,
            tasks=INTEGER,
            window=STRING,
            windowHint=STRING,
            debug=BOOLEAN,
            samplingPct=NUMBER,
            componentErrors=array(
                obj(
                    error=STRING,
                    errorSummary=SUMMARY,
                    errorTime=INTEGER,
                    errorHost=STRING,
                    errorPort=nullable(INTEGER),
                    errorLapsedSecs=INTEGER,
                    errorWorkerLogLink=STRING,
                )
            ),
            executorStats=array(
                obj(id=STRING, encodedId=STRING, host=STRING, port=INTEGER, **UPTIME, workerLogLink=STRING, **COUNTS)
            ),
            outputStats=array(obj(stream=STRING, emitted=INTEGER, transferred=INTEGER)),
            userMetrics=array(
                {
                    **obj(
                        task=STRING,
                        host=STRING,
                        port=INTEGER,
                        name=STRING,
                        type={"enum": ["counter", "gauge"]},
                        value=NUMBER,
                    ),
                    "description": "user metrics (TopologyContext.register_counter, register_gauge, "
                    "register_meter, register_histogram) per task, as of its latest heartbeat",
                }
            ),
        ),
        "oneOf": [
            obj(
                componentType={"const": "spout"},
                spoutSummary=array(obj(**WINDOW, **SPOUT_COUNTS)),
                executorStats=array(obj(completeLatency=DECIMAL)),
            ),
            obj(
                componentType={"const": "bolt"},
                boltStats=array(obj(**WINDOW, **BOLT_COUNTS)),
                executorStats=array(obj(**BOLT_COUNTS)),
                inputStats=array(
                    obj(
                        component=STRING,
                        encodedComponentId=STRING,
                        stream=STRING,
                        executed=INTEGER,
                        acked=INTEGER,
                        failed=INTEGER,
                        executeLatency=DECIMAL,
                        processLatency=DECIMAL,
                    )
                ),
            ),
        ],
    },
}

TOPOLOGY_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": STRING,
    "description": "a topology id, as /api/v1/topology/summary lists them",
}
WAIT_TIME = {
    "name": "wait_time",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": r"^\d+$"},
    "description": "seconds nimbus waits before acting",
}
STATS_QUERY = [
    {
        "name": "window",
        "in": "query",
        "schema": {"enum": list(WINDOWS), "default": ALL_TIME},
        "description": "the stats window: the last 600 s, 10800 s (3 h), 86400 s (1 day), or :all-time",
    },
    {
        "name": "sys",
        "in": "query",
        "schema": {"type": "string", "default": "0"},
        "description": "1 or true: include system components and streams",
    },
]


CALLBACK = {
    "name": "callback",
    "in": "query",
    "schema": {"type": "string", "pattern": r"^[A-Za-z_$][A-Za-z0-9_$.]*$", "maxLength": 64},
    "description": "JSONP (as Storm's UI): the answer is /**/CALLBACK(JSON); as application/javascript; "
    "a JavaScript function name, or names joined by dots",
}


def _ok(description: str, schema: str) -> dict[str, Any]:
    """A GET's answer: JSON, or JSONP with ``callback``."""
    return {
        "description": description,
        "content": {"application/json": {"schema": ref(schema)}, "application/javascript": {"schema": STRING}},
    }


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref("Error")}}}


#: With nimbus.authorizer on (docs/operations/security.md): what is refused, and to whom.
FORBIDDEN = _error(
    "nimbus.authorizer is on and the request has no client certificate, comes from another "
    "site's page, or its user may not do this to the topology (the message names both)"
)


def _get(summary: str, schema: str, parameters: Sequence[dict[str, Any]] = (), *, missing: str = "") -> dict[str, Any]:
    responses = {
        "200": _ok(summary, schema),
        "503": _error("nimbus is down, leaderless or too slow"),
        "403": FORBIDDEN,
        "400": _error(
            "a callback that is not a function name" + (", or a window nimbus does not keep" if missing else "")
        ),
    }
    if missing:
        responses["404"] = _error(missing)
    return {"get": {"summary": summary, "parameters": [*parameters, CALLBACK], "responses": responses}}


def _post(summary: str, parameters: list[dict[str, Any]], body: dict[str, Any] | None = None) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "parameters": parameters,
        "responses": {
            "200": {"description": "nimbus accepted it", "content": {"application/json": {"schema": ref("Operation")}}},
            "400": _error("a bad wait-time or body, or nimbus refused the change"),
            "403": FORBIDDEN,
            "404": _error("no topology has that id"),
            "503": _error("nimbus is down, leaderless or too slow"),
        },
    }
    if body is not None:
        operation["requestBody"] = {"required": False, "content": {"application/json": {"schema": body}}}
    return {"post": operation}


REBALANCE_BODY = obj(
    rebalanceOptions={
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "numWorkers": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
            "executors": {
                "type": "object",
                "additionalProperties": {
                    "oneOf": [
                        {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
                        {"type": "string", "pattern": r"^\d+$"},
                    ]
                },
            },
        },
    }
)

PATHS: dict[str, Any] = {
    "/api/v1/cluster/configuration": _get("the cluster configuration", "Configuration"),
    "/api/v1/cluster/summary": _get("slots, executors and tasks across the cluster", "ClusterSummary"),
    "/api/v1/nimbus/summary": _get("every nimbus, the leader first", "NimbusSummary"),
    "/api/v1/supervisor/summary": _get("every supervisor and its slots", "SupervisorSummary"),
    "/api/v1/supervisor": {
        "get": {
            "summary": "a supervisor and the workers on its host",
            "parameters": [
                {"name": "id", "in": "query", "schema": STRING, "description": "the supervisor's id"},
                {
                    "name": "host",
                    "in": "query",
                    "schema": STRING,
                    "description": "instead of id: the supervisors on this host",
                },
                CALLBACK,
            ],
            "responses": {
                "200": _ok("the supervisor(s) and the workers on their host", "Supervisor"),
                "400": _error("neither id nor host given, or a bad callback"),
                "404": _error("no supervisor has that id or runs on that host"),
                "503": _error("nimbus is down, leaderless or too slow"),
            },
        }
    },
    "/api/v1/topology/summary": _get("every topology", "TopologySummary"),
    "/api/v1/topology/{id}": _get(
        "a topology: its stats, components and workers",
        "Topology",
        [TOPOLOGY_ID, *STATS_QUERY],
        missing="no topology has that id",
    ),
    "/api/v1/topology/{id}/component/{component}": _get(
        "a component: its stats per window, stream, input and executor, and its errors",
        "Component",
        [TOPOLOGY_ID, {"name": "component", "in": "path", "required": True, "schema": STRING}, *STATS_QUERY],
        missing="no topology has that id, or it has no such component",
    ),
    "/api/v1/topology/{id}/activate": _post("activate the topology (its spouts run)", [TOPOLOGY_ID]),
    "/api/v1/topology/{id}/deactivate": _post("deactivate the topology (its spouts pause)", [TOPOLOGY_ID]),
    "/api/v1/topology/{id}/rebalance/{wait_time}": _post(
        "re-place the topology after wait_time seconds, optionally with new worker and executor counts",
        [TOPOLOGY_ID, WAIT_TIME],
        REBALANCE_BODY,
    ),
    "/api/v1/topology/{id}/kill/{wait_time}": _post(
        "kill the topology; it is removed after wait_time seconds", [TOPOLOGY_ID, WAIT_TIME]
    ),
    "/api/v1/openapi.json": {
        "get": {
            "summary": "this description",
            "responses": {
                "200": {"description": "OpenAPI 3.1", "content": {"application/json": {"schema": {"type": "object"}}}}
            },
        }
    },
}


def document() -> dict[str, Any]:
    """The whole OpenAPI document."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Squall UI REST API",
            "version": __version__,
            "description": "Storm's UI REST API v1 (Storm 2.x field names) over a Squall cluster.",
        },
        "paths": PATHS,
        "components": {"schemas": SCHEMAS},
    }
