"""The UI daemon: the REST API app served on ``ui.host``:``ui.port`` (:class:`squall.httpd.HttpServer`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.clock import Clock
from squall.httpd import HttpServer
from ui.app import create_app


class UiServer(HttpServer):
    """``storm ui``'s server::

        server = UiServer({**conf, "ui.port": 0}).start()
        print(f"http://127.0.0.1:{server.port}/api/v1/cluster/summary")
        server.stop()

    A stop waits for requests in flight at most as long as one waits on nimbus.
    """

    def __init__(self, conf: Mapping[str, Any], clock: Clock | None = None) -> None:
        super().__init__(create_app(conf, clock=clock), conf["ui.host"], conf["ui.port"], name="ui", title="the UI",
                         keys="ui.host, ui.port", grace_secs=float(conf["ui.nimbus.timeout.secs"]))
