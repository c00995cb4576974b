"""The UI daemon: the REST API app served on ``ui.host``:``ui.port`` (:class:`squall.core.httpd.HttpServer`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.core.clock import Clock
from squall.core.httpd import HttpServer, daemon_address
from ui.app import create_app


class UiServer(HttpServer):
    """``storm ui``'s server::

        server = UiServer({**conf, "ui.port": 0}).start()
        print(f"http://127.0.0.1:{server.port}/api/v1/cluster/summary")
        server.stop()

    A stop waits for requests in flight at most as long as one waits on nimbus. With ``ui.https.port`` it serves
    HTTPS there instead (:func:`squall.core.httpd.daemon_address`).
    """

    def __init__(self, conf: Mapping[str, Any], clock: Clock | None = None) -> None:
        host, port, keys, tls = daemon_address(conf, "ui")
        super().__init__(
            create_app(conf, clock=clock),
            host,
            port,
            name="ui",
            title="the UI",
            keys=keys,
            grace_secs=float(conf["ui.nimbus.timeout.secs"]),
            tls=tls,
        )
