"""The UI's HTML pages: cluster (``/``), topology, component and supervisor, rendered on the server with
Jinja2 from the very dicts the REST API serves (:mod:`ui.shapes`), so a page and ``/api/v1/...`` never
disagree. The action buttons POST to the REST API (``ui/static/ui.js``); nothing needs a build step.

Autoescape is on for every template: component and topology names are user input.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from squall.core.health import split_health
from squall.core.httpd import error_body, http_principal
from squall.core.stats import ALL_TIME, WINDOWS
from ui import graph, shapes
from ui.params import SYS_ON, window_and_sys
from ui.source import NimbusSource

#: How a page asks nimbus: ``await ask(source.cluster)`` runs the call on a worker thread.
Ask = Callable[..., Awaitable[Any]]

TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("ui", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def when(epoch_secs: int | None) -> str:
    """An error's time as people read it, in UTC.

    >>> when(1700000000), when(None)
    ('2023-11-14 22:13:20 UTC', '')
    """
    if epoch_secs is None:
        return ""
    return datetime.datetime.fromtimestamp(epoch_secs, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


TEMPLATES.filters["when"] = when
TEMPLATES.filters["rate"] = graph.rate_text
TEMPLATES.filters["encoded"] = shapes.encoded
#: The window selector's choices: Storm's window keys, labelled for people.
TEMPLATES.globals["windows"] = tuple(zip(WINDOWS, ("10 minutes", "3 hours", "1 day", "All time"), strict=True))
TEMPLATES.globals["default_window"] = ALL_TIME


def render(template: str, **context: Any) -> str:
    """One page's HTML::

    render("error.html", status="404 Not Found", message="no topology with id wc-1-1")
    """
    return TEMPLATES.get_template(template).render(**context)


def error_page(status: int, message: str) -> HTMLResponse:
    """A failed page: what went wrong, in the status's words, with the way back to the cluster page."""
    return HTMLResponse(
        render("error.html", status=error_body(status, message)["error"], message=message), status_code=status
    )


def topology_view(
    parts: Any, *, now_secs: int, window: str, sys: bool, logviewer_port: int | None = None
) -> dict[str, Any]:
    """What the topology page shows: the REST API's topology page and its picture (made from each bolt's
    ``inputStats``, as ``/api/v1/topology/ID/component/BOLT`` serves them)."""
    page = shapes.topology_page(
        parts.info, parts.topology, parts.conf, now_secs=now_secs, window=window, sys=sys, logviewer_port=logviewer_port
    )
    inputs = {
        b["boltId"]: shapes.component_page(
            parts.info, parts.topology, b["boltId"], now_secs=now_secs, window=window, sys=sys
        )["inputStats"]
        for b in page["bolts"]
    }
    return {
        "topology": page,
        "drawing": graph.topology_drawing(page, parts.topology, inputs, sys=sys),
        "health": split_health(page["schedulerInfo"])[0],
        "errors": shapes.last_errors(parts.info, now_secs=now_secs, logviewer_port=logviewer_port),
    }


def with_health(topologies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The topology table's rows with their Health and their errors apart (``health``, ``errors``: None when
    there is nothing to say), from Storm's ``schedulerInfo``."""
    return [{**t, **dict(zip(("health", "errors"), split_health(t["schedulerInfo"]), strict=True))} for t in topologies]


def routes(
    source: NimbusSource, ask: Ask, now: Callable[[], int], logviewer_port: int | None = None
) -> list[BaseRoute]:
    """The pages' routes and their static files, for :func:`ui.app.create_app`; workers and daemons link to their
    logs on the logviewers at ``logviewer_port``."""

    def page(template: str, make: Callable[[Request], Awaitable[Mapping[str, Any]]]) -> Callable[..., Any]:
        async def serve(request: Request) -> HTMLResponse:
            shows_system = request.query_params.get("sys", "0").lower() in SYS_ON  # for its show/hide link
            return HTMLResponse(render(template, **await make(request), sys=shows_system))

        return serve

    async def cluster(_request: Request) -> Mapping[str, Any]:
        summary, blacklist = await ask(source.cluster_and_blacklist)
        return {
            "cluster": shapes.cluster_summary(summary),
            "nimbuses": shapes.nimbus_summary(summary, logviewer_port)["nimbuses"],
            "supervisors": shapes.supervisor_summary(summary, blacklist, logviewer_port)["supervisors"],
            "topologies": with_health(shapes.topology_summary(summary)["topologies"]),
        }

    async def topology(request: Request) -> Mapping[str, Any]:
        window, sys = window_and_sys(request.query_params)
        parts = await ask(source.topology, request.path_params["id"])
        parts.check(http_principal(request.scope), "getTopology")
        return topology_view(parts, now_secs=now(), window=window, sys=sys, logviewer_port=logviewer_port)

    async def component(request: Request) -> Mapping[str, Any]:
        window, sys = window_and_sys(request.query_params)
        parts = await ask(source.topology, request.path_params["id"])
        parts.check(http_principal(request.scope), "getTopology")
        return {
            "component": shapes.component_page(
                parts.info,
                parts.topology,
                request.path_params["component"],
                now_secs=now(),
                window=window,
                sys=sys,
                logviewer_port=logviewer_port,
            )
        }

    async def supervisor(request: Request) -> Mapping[str, Any]:
        summary, blacklist, infos = await ask(source.cluster_with_topologies)
        return {
            "page": shapes.supervisor_page(
                summary, blacklist, infos, supervisor_id=request.path_params["id"], logviewer_port=logviewer_port
            )
        }

    return [
        Route("/", page("cluster.html", cluster), include_in_schema=False),
        Route("/topology/{id}", page("topology.html", topology), include_in_schema=False),
        Route("/topology/{id}/component/{component:path}", page("component.html", component), include_in_schema=False),
        Route("/supervisor/{id:path}", page("supervisor.html", supervisor), include_in_schema=False),
        Mount("/static", StaticFiles(packages=[("ui", "static")]), name="static"),
    ]
