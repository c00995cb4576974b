"""Serving HTTP from a daemon (``storm ui``, ``storm logviewer``): an ASGI app under uvicorn on a thread of its
own, and the error JSON both answer with.

The port is bound when the server is built, so a port in use (or port 0's pick) is known to the caller
before anything runs; ``start()`` returns once requests are answered.
"""

from __future__ import annotations

import contextvars
import http
import threading
import time
from typing import Any

import structlog
import uvicorn

from squall.thrift import listening_socket

log = structlog.get_logger(__name__)


def error_body(status: int, message: str) -> dict[str, str]:
    """Storm's error JSON: ``{"error": "404 Not Found", "errorMessage": "..."}``.

    >>> error_body(503, "nimbus is down")
    {'error': '503 Service Unavailable', 'errorMessage': 'nimbus is down'}
    """
    return {"error": f"{status} {http.HTTPStatus(status).phrase}", "errorMessage": message}


class HttpServer:
    """An ASGI ``app`` served on ``host``:``port`` (0: a free port, then in ``.port``); ``name`` is the daemon's,
    for its log lines (``ui started``), ``title`` and ``keys`` (the config keys that set the address) are for
    the error a busy port raises::

        server = HttpServer(app, "127.0.0.1", 0, name="ui", title="the UI", keys="ui.host, ui.port").start()
        print(f"http://127.0.0.1:{server.port}/")
        server.stop()

    A stop waits ``grace_secs`` at most for requests in flight.
    """

    def __init__(self, app: Any, host: str, port: int, *, name: str, title: str, keys: str,
                 grace_secs: float = 1) -> None:
        self.name = name
        self.host = host
        try:
            self._socket = listening_socket(host, port)
        except OSError as exc:
            raise OSError(exc.errno, f"{title} cannot listen on {host}:{port} ({keys}): {exc.strerror}") from None
        self.port: int = self._socket.getsockname()[1]
        # uvicorn leaves logging to Squall's setup (log_config=None); its lifespan protocol has nothing to run.
        self._server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off",
                                                     timeout_graceful_shutdown=max(1, round(grace_secs))))
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 30) -> HttpServer:
        """Serve in the background; returns once the server accepts requests."""
        context = contextvars.copy_context()  # the daemon's log context, for the serving thread's lines
        self._thread = threading.Thread(target=context.run, args=(self._server.run, [self._socket]),
                                        name=f"{self.name}-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the {self.name} server did not start on {self.host}:{self.port}")
            time.sleep(0.01)  # uvicorn offers no event to wait on
        log.info(f"{self.name} started", host=self.host, port=self.port)
        return self

    def stop(self) -> None:
        """Stop accepting, let requests in flight finish (uvicorn's graceful shutdown), close the port."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
        self._socket.close()
