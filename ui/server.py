"""The UI daemon: the REST API app served by uvicorn on ``ui.host``:``ui.port``, on a thread of its own.

The port is bound when the server is built, so a port in use (or port 0's pick) is known to the caller
before anything runs; ``start()`` returns once requests are answered.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Mapping
from typing import Any

import structlog
import uvicorn

from squall.clock import Clock
from squall.thrift import listening_socket
from ui.app import create_app

log = structlog.get_logger(__name__)


class UiServer:
    """``storm ui``'s server::

        server = UiServer({**conf, "ui.port": 0}).start()
        print(f"http://127.0.0.1:{server.port}/api/v1/cluster/summary")
        server.stop()
    """

    def __init__(self, conf: Mapping[str, Any], clock: Clock | None = None) -> None:
        self.host = conf["ui.host"]
        try:
            self._socket = listening_socket(self.host, conf["ui.port"])
        except OSError as exc:
            raise OSError(exc.errno, f"the UI cannot listen on {self.host}:{conf['ui.port']} (ui.host, ui.port): "
                                     f"{exc.strerror}") from None
        self.port: int = self._socket.getsockname()[1]
        # uvicorn leaves logging to Squall's setup (log_config=None); its lifespan protocol has nothing to run;
        # a stop waits for requests in flight at most as long as one waits on nimbus.
        self._server = uvicorn.Server(uvicorn.Config(
            create_app(conf, clock=clock), log_config=None, access_log=False, lifespan="off",
            timeout_graceful_shutdown=max(1, round(float(conf["ui.nimbus.timeout.secs"])))))
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 30) -> "UiServer":
        """Serve in the background; returns once the server accepts requests."""
        context = contextvars.copy_context()  # the daemon's log context, for the serving thread's lines
        self._thread = threading.Thread(target=context.run, args=(self._server.run, [self._socket]),
                                        name=f"ui-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the UI server did not start on {self.host}:{self.port}")
            time.sleep(0.01)  # uvicorn offers no event to wait on
        log.info("ui started", host=self.host, port=self.port)
        return self

    def stop(self) -> None:
        """Stop accepting, let requests in flight finish (uvicorn's graceful shutdown), close the port."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
        self._socket.close()
