"""The logviewer daemon: its app served on ``logviewer.host``:``logviewer.port``
(:class:`squall.core.httpd.HttpServer`), or over HTTPS on ``logviewer.https.port``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from logviewer.app import create_app
from squall.core.httpd import HttpServer, daemon_address


class LogviewerServer(HttpServer):
    """``storm logviewer``'s server, serving the worker logs under the conf's log directory::

    server = LogviewerServer({**conf, "logviewer.port": 0}).start()
    print(f"http://127.0.0.1:{server.port}/api/v1/listLogs")
    server.stop()
    """

    def __init__(self, conf: Mapping[str, Any]) -> None:
        host, port, keys, tls = daemon_address(conf, "logviewer")
        super().__init__(create_app(conf), host, port, name="logviewer", title="the logviewer", keys=keys, tls=tls)
