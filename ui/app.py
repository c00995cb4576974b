"""The UI's HTTP routes: Storm's UI REST API v1 on Starlette, each route a thin step from request to
:mod:`ui.source` (nimbus) to :mod:`ui.shapes` (Storm's JSON), and the HTML pages (:mod:`ui.pages`) made
from the same JSON.

Who may see and do what (docs/operations/security.md): over HTTPS (``ui.https.*``) a request's user is its client
certificate's common name; with ``nimbus.authorizer`` on, a request without one is refused (403), a topology's
pages and REST GETs are for whoever nimbus's ACLs let read it (its owner, ``topology.users``/``groups``,
``nimbus.admins``) and its actions for whoever they let do them, else 403 naming the user and the operation.
The UI asks nimbus with its own certificate, which nimbus lets act for others only when it is listed in
``nimbus.impersonation.users``. Without an authorizer everyone may do everything, as before.

API errors are JSON in Storm's shape (``{"error": "404 Not Found", "errorMessage": ...}``), a page's an
HTML page with the same status and message: an unknown
topology or component is 404, a bad parameter or a request nimbus refuses as invalid 400, nimbus down or
too slow 503 (the daemon keeps serving), any other failure 500. Nimbus is called on Starlette's thread
pool, so a slow nimbus holds a thread, never the event loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import structlog
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from thriftpy2.thrift import TApplicationException

from squall.core.auth import Authorizer
from squall.core.clock import Clock, RealClock
from squall.core.httpd import error_body, http_principal, identified
from squall.core.thrift import storm
from ui import metrics, pages, shapes
from ui.openapi import document
from ui.params import BadRequest, jsonp_callback, rebalance_options, supervisor_query, wait_secs, window_and_sys
from ui.source import NimbusSource, NimbusUnreachable

log = structlog.get_logger(__name__)


def create_app(conf: Mapping[str, Any], *, source: NimbusSource | None = None, clock: Clock | None = None) -> Starlette:
    """The ASGI app of the UI daemon for the cluster ``conf`` points at::

    app = create_app(load_config())        # serve with uvicorn, or test with starlette.testclient
    """
    source = source or NimbusSource(conf)
    identify = Authorizer(conf).enabled  # users are their certificates: anonymous ones and other sites refused
    clock = clock or RealClock()
    logs = shapes.logviewer_port_of(conf)  # each worker's and daemon's log is on the logviewer of its host, here

    def now() -> int:
        return int(clock.time())

    async def ask(call: Callable[..., Any], *args: Any) -> Any:
        return await run_in_threadpool(call, *args)

    async def configuration(request: Request) -> Response:
        return reply(request, await ask(source.nimbus_conf))

    async def cluster_summary(request: Request) -> Response:
        return reply(request, shapes.cluster_summary(await ask(source.cluster)))

    async def nimbus_summary(request: Request) -> Response:
        return reply(request, shapes.nimbus_summary(await ask(source.cluster), logs))

    async def supervisor_summary(request: Request) -> Response:
        summary, blacklist = await ask(source.cluster_and_blacklist)
        return reply(request, shapes.supervisor_summary(summary, blacklist, logs))

    async def supervisor_page(request: Request) -> Response:
        query = supervisor_query(request.query_params)
        cluster, blacklist, infos = await ask(source.cluster_with_topologies)
        return reply(request, shapes.supervisor_page(cluster, blacklist, infos, **query, logviewer_port=logs))

    async def topology_summary(request: Request) -> Response:
        return reply(request, shapes.topology_summary(await ask(source.cluster)))

    async def topology_page(request: Request) -> Response:
        window, sys = window_and_sys(request.query_params)
        parts = await ask(source.topology, request.path_params["id"])
        parts.check(http_principal(request.scope), "getTopology")
        return reply(
            request,
            shapes.topology_page(
                parts.info, parts.topology, parts.conf, now_secs=now(), window=window, sys=sys, logviewer_port=logs
            ),
        )

    async def component_page(request: Request) -> Response:
        window, sys = window_and_sys(request.query_params)
        parts = await ask(source.topology, request.path_params["id"])
        parts.check(http_principal(request.scope), "getTopology")
        return reply(
            request,
            shapes.component_page(
                parts.info,
                parts.topology,
                request.path_params["component"],
                now_secs=now(),
                window=window,
                sys=sys,
                logviewer_port=logs,
            ),
        )

    def action(
        operation: str, prepare: Callable[[Request, bytes], NimbusCall], nimbus_operation: str = ""
    ) -> Callable[..., Any]:
        """A POST route: the request is checked first, then whether its user may (``nimbus_operation``, as
        nimbus's ACLs name it), then nimbus is called with the topology's name."""

        async def run(request: Request) -> JSONResponse:
            topology_id = request.path_params["id"]
            if identify and not same_origin(request):
                raise HTTPException(
                    403,
                    f"{operation} from another site's page ({request.headers['origin']}) is "
                    "refused: a browser presents the user's certificate to any page's request",
                )
            call = prepare(request, await request.body())
            await ask(source.operate, topology_id, call, http_principal(request.scope), nimbus_operation or operation)
            log.info("topology action", operation=operation, topology_id=topology_id)
            return JSONResponse(shapes.operation_body(topology_id, operation))

        return run

    openapi = document()

    routes = [
        Route("/api/v1/cluster/configuration", configuration),
        Route("/api/v1/cluster/summary", cluster_summary),
        Route("/api/v1/nimbus/summary", nimbus_summary),
        Route("/api/v1/supervisor/summary", supervisor_summary),
        Route("/api/v1/supervisor", supervisor_page),
        Route("/api/v1/topology/summary", topology_summary),
        Route("/api/v1/topology/{id}", topology_page),
        Route("/api/v1/topology/{id}/component/{component}", component_page),
        Route("/api/v1/topology/{id}/activate", action("activate", _activate), methods=["POST"]),
        Route("/api/v1/topology/{id}/deactivate", action("deactivate", _deactivate), methods=["POST"]),
        Route("/api/v1/topology/{id}/rebalance/{wait_time}", action("rebalance", _rebalance), methods=["POST"]),
        Route("/api/v1/topology/{id}/kill/{wait_time}", action("kill", _kill, "killTopology"), methods=["POST"]),
        Route("/api/v1/openapi.json", lambda _request: JSONResponse(openapi)),
        *pages.routes(source, ask, now, logs),
        metrics.route(source, ask),
    ]
    return Starlette(routes=routes, exception_handlers=_ERRORS, middleware=[identified(identify)])


def same_origin(request: Request) -> bool:
    """Whether a request comes from the UI's own pages or from a tool: browsers send ``Origin`` with every
    cross-site POST, tools (curl, streamparse) none; a page of another site could otherwise make the browser
    act with its user's client certificate (cross-site request forgery)."""
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host")


def reply(request: Request, body: Any) -> Response:
    """A GET's JSON, or with Storm's ``callback`` parameter its JSONP: ``/**/NAME(JSON);`` as JavaScript (the
    comment keeps the answer from starting with bytes the caller chose; ``ensure_ascii`` escapes U+2028)."""
    callback = jsonp_callback(request.query_params)
    if callback is None:
        return JSONResponse(body)
    text = json.dumps(body, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return Response(
        f"/**/{callback}({text});", media_type="application/javascript", headers={"X-Content-Type-Options": "nosniff"}
    )


#: What an action does once the topology's name is known: ``call(nimbus, name)``.
NimbusCall = Callable[[Any, str], None]


def _activate(_request: Request, _body: bytes) -> NimbusCall:
    return lambda nimbus, name: nimbus.activate(name)


def _deactivate(_request: Request, _body: bytes) -> NimbusCall:
    return lambda nimbus, name: nimbus.deactivate(name)


def _rebalance(request: Request, body: bytes) -> NimbusCall:
    options = rebalance_options(wait_secs(request.path_params["wait_time"]), body)
    return lambda nimbus, name: nimbus.rebalance(name, options)


def _kill(request: Request, _body: bytes) -> NimbusCall:
    options = storm.KillOptions(wait_secs=wait_secs(request.path_params["wait_time"]))
    return lambda nimbus, name: nimbus.killTopologyWithOpts(name, options)


def _answer(request: Request, status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    """A failure as the caller reads it: Storm's error JSON under ``/api/``, an error page elsewhere."""
    if request.url.path.startswith("/api/"):
        return JSONResponse(error_body(status, message), status_code=status, headers=headers)
    return pages.error_page(status, message)


def _failure(status: int, message: Callable[[Any], str] = str) -> Callable[[Request, Exception], Any]:
    def handle(request: Request, exc: Exception) -> Response:
        if status >= 500:
            log.warning("ui request failed", status=status, error=f"{type(exc).__name__}: {exc}")
        return _answer(request, status, message(exc))

    return handle


def _http_error(request: Request, exc: Exception) -> Response:
    """The router's own refusals (no such path, wrong method), saying where the API and the pages are."""
    assert isinstance(exc, HTTPException)
    path = request.url.path
    where = "see /api/v1/openapi.json" if path.startswith("/api/") else "the cluster's page is /"
    message = {
        404: f"{path} is not part of the UI; {where}",
        405: f"{request.method} is not allowed on {path}; {where}",
    }
    return _answer(request, exc.status_code, message.get(exc.status_code, exc.detail), exc.headers)


#: Exception → HTTP status. Storm answers 500 to nearly everything; these say what happened.
_ERRORS: dict[Any, Callable[[Request, Exception], Any]] = {
    HTTPException: _http_error,
    storm.NotAliveException: _failure(404, lambda e: f"no topology with id {e.msg}"),
    shapes.UnknownComponent: _failure(404),
    shapes.UnknownSupervisor: _failure(404),
    BadRequest: _failure(400),
    storm.InvalidTopologyException: _failure(400, lambda e: e.msg),
    storm.AuthorizationException: _failure(403, lambda e: e.msg),
    NimbusUnreachable: _failure(503),
    TApplicationException: _failure(500, lambda e: f"nimbus error: {e.message}"),
    Exception: _failure(500, lambda e: f"{type(e).__name__}: {e}"),
}
