"""The logviewer's HTTP routes (Starlette), after Storm's logviewer: a page of a log for people, the same
bytes for tools, the whole file, a search within it, and the list of files.

==============================================  =========================================================
``GET /``                                       the files, linked to their pages
``GET /api/v1/log?file=F[&start=S][&length=L]`` a page of F as HTML (the last L bytes without S), with
                                                first / previous / next / last, download and search
``GET /api/v1/read?file=F[&start=S][&length=L]``  the same bytes as text; ``X-Log-Start``, ``X-Log-End``
                                                and ``X-Log-Size`` say where they lie (``storm logs -f``)
``GET /api/v1/download?file=F``                 the file as it was when asked for
``GET /api/v1/search?file=F&search-string=X``   Storm's search JSON (``num-matches``, ``start-byte-offset``)
``GET /api/v1/listLogs[?topoId=ID][&port=P]``   the files' names, as JSON
==============================================  =========================================================

Errors are Storm's error JSON: 400 for a bad parameter, 403 for a name outside the log directory, 404 for a
file that is not there. Files are read on Starlette's thread pool, never on the event loop.
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

from logviewer.files import CHUNK, DEFAULT_MATCHES, DEFAULT_PAGE, LogDir, LogError
from squall.httpd import error_body
from squall.local_state import log_dir, worker_of_log

TEMPLATES = jinja2.Environment(loader=jinja2.PackageLoader("logviewer", "templates"), autoescape=True,
                               undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


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


def create_app(conf: Mapping[str, Any]) -> Starlette:
    """The logviewer of the worker logs under ``storm.log.dir`` (else ``<storm.local.dir>/logs``)::

        app = create_app(load_config())        # serve with uvicorn, or test with starlette.testclient
    """
    logs = LogDir(log_dir(conf))
    host = conf.get("storm.local.hostname") or socket.getfqdn()

    def render(template: str, **context: Any) -> HTMLResponse:
        return HTMLResponse(TEMPLATES.get_template(template).render(host=host, **context))

    async def index(_request: Request) -> HTMLResponse:
        return render("index.html", root=str(logs.root), names=await run_in_threadpool(logs.names))

    def page_of(request: Request) -> Any:
        query = request.query_params
        return logs.page(_file(request), _optional(query, "start"), _number(query, "length", DEFAULT_PAGE))

    async def log_page(request: Request) -> HTMLResponse:
        page = await run_in_threadpool(page_of, request)
        length = _number(request.query_params, "length", DEFAULT_PAGE)
        return render("log.html", page=page, length=length, text=page.data.decode("utf-8", "replace"))

    async def read(request: Request) -> Response:
        page = await run_in_threadpool(page_of, request)
        return Response(page.data, media_type="text/plain; charset=utf-8", headers={
            "X-Log-Start": str(page.start), "X-Log-End": str(page.end), "X-Log-Size": str(page.size)})

    def located(name: str) -> tuple[Path, int]:
        path = logs.path(name)
        return path, path.stat().st_size  # what is written after this is not part of a download

    async def download(request: Request) -> StreamingResponse:
        path, size = await run_in_threadpool(located, _file(request))

        def chunks() -> Iterator[bytes]:
            with open(path, "rb") as f:
                left = size
                while left > 0 and (data := f.read(min(CHUNK, left))):
                    left -= len(data)
                    yield data

        return StreamingResponse(chunks(), media_type="text/plain; charset=utf-8", headers={
            "Content-Length": str(size), "Content-Disposition": f'attachment; filename="{path.name}"'})

    async def search(request: Request) -> JSONResponse:
        query = request.query_params
        name = _file(request)
        found = await run_in_threadpool(lambda: logs.search(
            name, query.get("search-string", "").encode(), start=_number(query, "start-byte-offset", 0),
            matches=_number(query, "num-matches", DEFAULT_MATCHES)))
        around = f"{request.base_url}api/v1/log?file={quote(name, safe='')}"
        return JSONResponse({
            "isDaemon": "no", "file": name, "searchString": query.get("search-string"),
            "startByteOffset": found.start, "nextByteOffset": found.next,
            "matches": [{"byteOffset": m.offset, "beforeString": m.before.decode("utf-8", "replace"),
                         "matchString": m.match.decode("utf-8", "replace"),
                         "afterString": m.after.decode("utf-8", "replace"),
                         "logviewerURL": f"{around}&start={max(0, m.offset - DEFAULT_PAGE // 2)}"
                                         f"&length={DEFAULT_PAGE}"} for m in found.matches],
        })

    async def list_logs(request: Request) -> JSONResponse:
        topology, port = request.query_params.get("topoId"), _optional(request.query_params, "port")
        names = await run_in_threadpool(logs.names)
        if topology or port is not None:
            names = [n for n in names if (worker := worker_of_log(n)) is not None
                     and topology in (None, "", worker[0]) and port in (None, worker[1])]
        return JSONResponse(names)

    routes = [
        Route("/", index),
        Route("/api/v1/log", log_page),
        Route("/api/v1/read", read),
        Route("/api/v1/download", download),
        Route("/api/v1/search", search),
        Route("/api/v1/listLogs", list_logs),
    ]
    return Starlette(routes=routes, exception_handlers={LogError: _log_error, HTTPException: _http_error})


def _log_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, LogError)
    return JSONResponse(error_body(exc.status, str(exc)), status_code=exc.status)


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    message = (f"{request.url.path} is not part of the logviewer; / lists the logs" if exc.status_code == 404
               else exc.detail)
    return JSONResponse(error_body(exc.status_code, message), status_code=exc.status_code, headers=exc.headers)
