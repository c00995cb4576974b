"""The one SparkSession of a worker process: started by its first Spark bolt, shared, stopped by its last.

A JVM costs ~10 s and ~400 MB to start and each job ~0.3 s, so a worker starts Spark once and only if
it hosts a Spark bolt: pyspark is imported here, lazily, and nothing else in a worker imports this
module. The session starts inside the bolt's ``prepare``, which runs before the worker's first
heartbeat, so its slow start counts against ``supervisor.worker.start.timeout.secs`` and
``nimbus.task.launch.secs`` (120 s each), never against the running-worker timeouts.

Where Spark runs: ``spark.remote`` (Spark Connect) if set, else ``spark.master`` if set, else
``local[N]`` in the worker with N = this host's cores / its supervisor slots. Every other ``spark.*``
key of the topology conf is passed to the builder, over these defaults: UI off, Arrow on, shuffle
partitions = N (Spark's 200 would make every micro-batch job run 200 tasks), adaptive query execution off
(as Structured Streaming runs its micro-batches: re-planning each stage of a small job costs ~10 % of its
CPU and gains nothing), logs at WARN.

Under Spark Connect (``sc://host:port``: a server on the host, see :mod:`squall.dev.sparkconnect`, or a Spark
cluster's endpoint) the worker runs no JVM and its session starts in about a second; the builder's SQL
settings become the remote session's, static ones (UI, app name) are the server's business. The session
then has no ``sparkContext`` and no RDDs: Spark bolts only use DataFrames, in and out as Arrow tables.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from squall.core.extras import require

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["acquire", "builder_conf", "release", "slot_cores", "where"]

log = structlog.get_logger(__name__)

#: spark.* keys that are not builder conf: ours (for Spark bolts) and the two that pick where Spark runs.
NOT_SPARK_CONF = frozenset({"spark.batch.size", "spark.batch.interval.ms", "spark.master", "spark.remote"})

_lock = threading.Lock()
_session: SparkSession | None = None
_users = 0


def slot_cores(conf: Mapping[str, Any], cores: int | None = None) -> int:
    """This worker's share of the host's cores: cores / supervisor slots, at least 1."""
    slots = len(conf.get("supervisor.slots.ports") or ()) or 1
    return max(1, (cores or os.cpu_count() or 1) // slots)


def where(conf: Mapping[str, Any], cores: int | None = None) -> tuple[str, str]:
    """``("remote", url)`` or ``("master", master)``: where this worker's Spark jobs run."""
    if conf.get("spark.remote"):
        return "remote", str(conf["spark.remote"])
    if conf.get("spark.master"):
        return "master", str(conf["spark.master"])
    return "master", f"local[{slot_cores(conf, cores)}]"


def builder_conf(conf: Mapping[str, Any], app_name: str, cores: int | None = None) -> dict[str, str]:
    """The Spark conf a worker starts its session with: defaults, then the topology's ``spark.*`` keys."""
    spark = {
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.shuffle.partitions": str(slot_cores(conf, cores)),
        "spark.sql.adaptive.enabled": "false",
        "spark.log.level": "WARN",
    }
    for key, value in conf.items():
        if key.startswith("spark.") and key not in NOT_SPARK_CONF and value is not None:
            spark[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return spark


def acquire(conf: Mapping[str, Any], app_name: str) -> SparkSession:
    """This process's session, started (and warmed up with a tiny job) on the first call."""
    global _session, _users
    with _lock:
        if _session is None:
            _session = _start(conf, app_name)
        _users += 1
        return _session


def release() -> None:
    """One user is done with the session; the last one stops it (and with it the JVM)."""
    global _session, _users
    with _lock:
        _users -= 1
        if _users > 0 or _session is None:
            return
        session, _session, _users = _session, None, 0
    session.stop()
    log.info("spark session stopped")


def _start(conf: Mapping[str, Any], app_name: str) -> SparkSession:
    # Spark's Python workers (UDFs, Arrow) must run this interpreter, not the system python3.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    require("spark", "this worker's Spark bolt")
    from pyspark.sql import SparkSession

    kind, url = where(conf)
    builder = SparkSession.builder.remote(url) if kind == "remote" else SparkSession.builder.master(url)
    for key, value in builder_conf(conf, app_name).items():
        builder = builder.config(key, value)
    log.info("starting spark session", **{kind: url})
    session = builder.getOrCreate()
    session.range(1).count()  # the first job costs seconds: pay it here, not in the first batch
    log.info("spark session ready", version=session.version, **{kind: url})
    return session
