"""The logviewer's HTTP routes (Starlette), after Storm's logviewer: a page of a log for people, the same
bytes for tools, the whole file, a search within it, and the list of files — for the workers' logs, and for the
daemons' own (``nimbus.log``, ``supervisor.log``, ``ui.log``, ``logviewer.log`` and their rolled files, which
:func:`squall.core.entry.run_daemon` writes in the same directory).

==============================================  =========================================================
``GET /``                                       the files, linked to their pages
``GET /api/v1/log?file=F[&start=S][&length=L]`` a page of F as HTML (the last L bytes without S), with
                                                first / previous / next / last, download and search; its
                                                JSON records as readable lines (:func:`squall.core.logs.readable`)
``GET /api/v1/read?file=F[&start=S][&length=L]``  the same bytes as they are; ``X-Log-Start``, ``X-Log-End``
                                                and ``X-Log-Size`` say where they lie (``storm logs -f``)
``GET /api/v1/download?file=F``                 the file as it was when asked for
``GET /api/v1/search?file=F&search-string=X``   Storm's search JSON (``num-matches``, ``start-byte-offset``)
``GET /api/v1/listLogs[?topoId=ID][&port=P]``   the files' names, as JSON
``GET /daemonlog?file=D[&start=S][&length=L]``  a page of the daemon log D (Storm's; ``/api/v1/daemonlog`` too)
``GET /api/v1/daemondownload?file=D``           the daemon log as it was when asked for
``GET /api/v1/search?file=D&is-daemon=yes&…``   a search in a daemon log (Storm's ``is-daemon``)
``GET /api/v1/listDaemonLogs``                  the daemon logs' names, as JSON
==============================================  =========================================================

Errors are Storm's error JSON: 400 for a bad parameter, 403 for a name outside the log directory, a daemon log
asked of a worker log's route or the other way round, or a reader who may not read it, 404 for a file that is
not there. A daemon log is only ever a plain name directly in the directory (no path, no symlink to elsewhere).

Who may read what (docs/operations/security.md): over HTTPS (``logviewer.https.*``) a reader is its client certificate's
common name. With ``nimbus.authorizer`` on, an anonymous reader is refused everything, and a worker's log is
readable only by its topology's owner, ``topology.users``/``groups``, ``logs.users``/``groups`` (as the
supervisor wrote them, :func:`squall.core.local_state.write_log_acl`), ``nimbus.admins`` and the operators
(``logs.users``/``groups`` of the logviewer's own conf, as Storm's logviewer whitelists them); a daemon's log
by the operators and admins only (``readDaemonLogs``); other files by admins only. The lists show only what
the reader may read. Files are read on Starlette's thread
pool, never on the event loop.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from logviewer.files import CHUNK, DEFAULT_MATCHES, DEFAULT_PAGE, LogDir, LogError, Refused
from squall.core.auth import DAEMON_LOGS, LOGS, Authorizer, TopologyAcl
from squall.core.httpd import error_body, http_principal, identified
from squall.core.local_state import DAEMONS, is_daemon_log, log_dir, read_log_acl, worker_of_log
from squall.core.logs import readable_text
from squall.core.thrift import storm

TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("logviewer", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _optional(query: Mapping[str, str], key: str) -> int | None:
    """A whole-number query parameter, None when it is absent."""
    text = query.get(key)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise LogError(f"{key} must be a whole number, got {text!r}") from None


def _number(query: Mapping[str, str], key: str, default: int) -> int:
    """A whole-number query parameter, ``default`` when it is absent."""
    value = _optional(query, key)
    return default if value is None else value


def _file(request: Request) -> str:
    return request.query_params.get("file", "")


#: Where each kind of log is paged, downloaded and listed (the daemons' are Storm's paths).
WORKER_ROUTES = {"page": "/api/v1/log", "download": "/api/v1/download", "list": "/api/v1/listLogs"}
DAEMON_ROUTES = {"page": "/daemonlog", "download": "/api/v1/daemondownload", "list": "/api/v1/listDaemonLogs"}


def create_app(conf: Mapping[str, Any]) -> Starlette:
    """The logviewer of the worker and daemon logs under ``storm.log.dir`` (else ``<storm.local.dir>/logs``)::

    app = create_app(load_config())        # serve with uvicorn, or test with starlette.testclient
    """
    logs = LogDir(log_dir(conf))
    host = conf.get("storm.local.hostname") or socket.getfqdn()
    access = Authorizer(conf)

    def refusal(request: Request, name: str) -> str | None:
        """Why the request's reader may not read the file ``name`` (named as :meth:`LogDir.names` names it); None
        when it may."""
        if not access.enabled:
            return None
        worker = worker_of_log(name)
        topology_id = worker[0] if worker is not None else name
        owner, acl = read_log_acl(conf, topology_id) if worker is not None else ("", {})
        try:
            access.check(
                http_principal(request.scope),
                DAEMON_LOGS if is_daemon_log(name) else LOGS,
                TopologyAcl(topology_id, owner, acl),
            )
        except storm.AuthorizationException as exc:
            return str(exc.msg)
        return None

    def checked(request: Request, *, daemon: bool = False) -> str:
        """The requested file's name, once it is in the directory, of the kind the route serves (a daemon's log:
        a plain name, no symlink) and the reader may read it."""
        name = _file(request)
        if daemon and not is_daemon_log(name):
            logs.path(name)  # a name outside the directory, or none, is told as such
            raise Refused(
                f"{name!r} is no daemon's log ({', '.join(f'{d}.log' for d in DAEMONS)}, or one rolled: "
                f"nimbus.log.1); {DAEMON_ROUTES['list']} lists them"
            )
        resolved = logs.path(name).relative_to(logs.root.resolve()).as_posix()
        if daemon and (logs.root / name).is_symlink():
            raise Refused(f"{name!r} links to another file; only the daemons' own log files are served")
        if not daemon and is_daemon_log(resolved):
            raise Refused(f"{resolved!r} is a daemon's log: {DAEMON_ROUTES['page']}?file={quote(resolved)} serves it")
        why = refusal(request, resolved)
        if why is not None:
            raise Refused(why)
        return name

    def readable(request: Request, *, daemon: bool = False) -> list[str]:
        return [
            name
            for name in logs.names()
            if is_daemon_log(name) == daemon
            and refusal(request, name) is None
            and not (daemon and (logs.root / name).is_symlink())
        ]

    def render(template: str, **context: Any) -> HTMLResponse:
        return HTMLResponse(TEMPLATES.get_template(template).render(host=host, **context))

    async def index(request: Request) -> HTMLResponse:
        return render(
            "index.html",
            root=str(logs.root),
            names=await run_in_threadpool(readable, request),
            daemon_names=await run_in_threadpool(lambda: readable(request, daemon=True)),
        )

    def page_of(request: Request, daemon: bool = False) -> Any:
        query = request.query_params
        return logs.page(
            checked(request, daemon=daemon), _optional(query, "start"), _number(query, "length", DEFAULT_PAGE)
        )

    def log_page(daemon: bool) -> Any:
        async def serve(request: Request) -> HTMLResponse:
            page = await run_in_threadpool(page_of, request, daemon)
            length = _number(request.query_params, "length", DEFAULT_PAGE)
            text = readable_text(page.data.decode("utf-8", "replace"))
            return render(
                "log.html",
                page=page,
                length=length,
                text=text,
                routes=DAEMON_ROUTES if daemon else WORKER_ROUTES,
                daemon=daemon,
            )

        return serve

    async def read(request: Request) -> Response:
        page = await run_in_threadpool(page_of, request)
        return Response(
            page.data,
            media_type="text/plain; charset=utf-8",
            headers={"X-Log-Start": str(page.start), "X-Log-End": str(page.end), "X-Log-Size": str(page.size)},
        )

    def located(request: Request, daemon: bool) -> tuple[Path, int]:
        path = logs.path(checked(request, daemon=daemon))
        return path, path.stat().st_size  # what is written after this is not part of a download

    def download(daemon: bool) -> Any:
        async def serve(request: Request) -> StreamingResponse:
            path, size = await run_in_threadpool(located, request, daemon)

            def chunks() -> Iterator[bytes]:
                with open(path, "rb") as f:
                    left = size
                    while left > 0 and (data := f.read(min(CHUNK, left))):
                        left -= len(data)
                        yield data

            return StreamingResponse(
                chunks(),
                media_type="text/plain; charset=utf-8",
                headers={"Content-Length": str(size), "Content-Disposition": f'attachment; filename="{path.name}"'},
            )

        return serve

    async def search(request: Request) -> JSONResponse:
        query = request.query_params
        daemon = query.get("is-daemon", "no") == "yes"
        name = await run_in_threadpool(lambda: checked(request, daemon=daemon))
        found = await run_in_threadpool(
            lambda: logs.search(
                name,
                query.get("search-string", "").encode(),
                start=_number(query, "start-byte-offset", 0),
                matches=_number(query, "num-matches", DEFAULT_MATCHES),
            )
        )
        page = (DAEMON_ROUTES if daemon else WORKER_ROUTES)["page"]
        around = f"{str(request.base_url).rstrip('/')}{page}?file={quote(name, safe='')}"
        return JSONResponse(
            {
                "isDaemon": "yes" if daemon else "no",
                "file": name,
                "searchString": query.get("search-string"),
                "startByteOffset": found.start,
                "nextByteOffset": found.next,
                "matches": [
                    {
                        "byteOffset": m.offset,
                        "beforeString": m.before.decode("utf-8", "replace"),
                        "matchString": m.match.decode("utf-8", "replace"),
                        "afterString": m.after.decode("utf-8", "replace"),
                        "logviewerURL": f"{around}&start={max(0, m.offset - DEFAULT_PAGE // 2)}&length={DEFAULT_PAGE}",
                    }
                    for m in found.matches
                ],
            }
        )

    async def list_logs(request: Request) -> JSONResponse:
        topology, port = request.query_params.get("topoId"), _optional(request.query_params, "port")
        names = await run_in_threadpool(readable, request)
        if topology or port is not None:
            names = [
                n
                for n in names
                if (worker := worker_of_log(n)) is not None
                and topology in (None, "", worker[0])
                and port in (None, worker[1])
            ]
        return JSONResponse(names)

    async def list_daemon_logs(request: Request) -> JSONResponse:
        return JSONResponse(await run_in_threadpool(lambda: readable(request, daemon=True)))

    routes = [
        Route("/", index),
        Route(WORKER_ROUTES["page"], log_page(daemon=False)),
        Route("/api/v1/read", read),
        Route(WORKER_ROUTES["download"], download(daemon=False)),
        Route("/api/v1/search", search),
        Route(WORKER_ROUTES["list"], list_logs),
        Route(DAEMON_ROUTES["page"], log_page(daemon=True)),
        Route("/api/v1/daemonlog", log_page(daemon=True)),
        Route(DAEMON_ROUTES["download"], download(daemon=True)),
        Route(DAEMON_ROUTES["list"], list_daemon_logs),
    ]
    return Starlette(
        routes=routes,
        exception_handlers={LogError: _log_error, HTTPException: _http_error},
        middleware=[identified(access.enabled)],
    )


def _log_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, LogError)
    return JSONResponse(error_body(exc.status, str(exc)), status_code=exc.status)


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    message = (
        f"{request.url.path} is not part of the logviewer; / lists the logs" if exc.status_code == 404 else exc.detail
    )
    return JSONResponse(error_body(exc.status_code, message), status_code=exc.status_code, headers=exc.headers)
