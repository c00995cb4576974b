"""A Spark Connect server on this host, shared by the workers' Spark bolts (``spark.remote``).

A worker whose Spark session runs in its own JVM (``local[N]``, the zero-setup default) takes 10-20 s to
start; a worker whose session is a Spark Connect client of a server that is already up starts in about a
second and runs no JVM at all. The server is pyspark's own (its wheel ships ``spark-connect_*.jar`` and
``spark-submit``), run in the foreground so a service manager, or a test, owns its pid::

    storm spark-connect --port 15002 --master 'local[*]'    # then spark.remote: "sc://localhost:15002"

    server = subprocess.Popen(server_command(15002, "local[2]"))   # the same, from Python
    wait_for(lambda: serving(15002), 120, "the Spark Connect server")

It listens on 127.0.0.1 only (Spark Connect has no authentication of its own): the workers of this host
reach it; a Spark cluster's own Connect endpoint is for several hosts.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from squall.api.sparksession import NOT_SPARK_CONF
from squall.core.extras import require

__all__ = ["DEFAULT_PORT", "SERVER_CLASS", "serving", "server_command", "spark_home"]

#: Spark Connect's usual port.
DEFAULT_PORT = 15002
#: The main class spark-submit runs for a Connect server (what pyspark's sbin/start-connect-server.sh runs).
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def spark_home() -> Path:
    """``$SPARK_HOME`` if set, else the installed pyspark package (its wheel is a full Spark distribution)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    require("spark", "a Spark Connect server without $SPARK_HOME")
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def server_command(
    port: int = DEFAULT_PORT, master: str = "local[*]", conf: Mapping[str, Any] | None = None
) -> list[str]:
    """The argv of a Connect server on ``127.0.0.1:port`` in the foreground; ``conf``'s ``spark.*`` keys (not
    Squall's own, nor ``spark.master``/``spark.remote``) become its ``--conf`` settings.

    A taken port fails the server at once (no retry on the next port, which no worker would know)."""
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.port.maxRetries": "0",
        "spark.ui.showConsoleProgress": "false",
    }
    for key, value in (conf or {}).items():
        if key.startswith("spark.") and key not in NOT_SPARK_CONF and value is not None:
            settings[key] = str(value).lower() if isinstance(value, bool) else str(value)
    argv = [
        str(spark_home() / "bin" / "spark-submit"),
        "--class",
        SERVER_CLASS,
        "--name",
        "Spark Connect server",
        "--master",
        master,
    ]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    return argv


def serving(port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on ``host:port`` (the server opens its port once it is ready)."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False
