"""A standalone ZooKeeper process from Debian's ``zookeeper`` package, for development and tests.

Used by ``storm dev-zookeeper`` and by the test fixture. It is a real server (same jars a Debian host
runs), started as a child process we own by pid and stop by pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

#: Debian's layout; ``SQUALL_ZOOKEEPER_CLASSPATH`` overrides it (e.g. an unpacked Apache tarball's lib/*).
DEBIAN_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZooKeeperUnavailable(RuntimeError):
    """Java or the ZooKeeper jars are missing, or the server did not come up."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def stop_child(process: subprocess.Popen[bytes], grace: float) -> bool:
    """SIGTERM a child we started, SIGKILL it after ``grace`` seconds; False if it had already exited. By its pid,
    never by name."""
    if process.poll() is not None:
        return False
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return True


def four_letter(host: str, port: int, command: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``srvr``…) and return the reply."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(command.encode())
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def is_serving(host: str, port: int) -> bool:
    """The server takes sessions. ``ruok`` says only that the process is up: a server still loading its data
    answers ``imok`` and then drops every connection, so ask ``srvr``, which names the mode only once serving."""
    try:
        return "Mode: " in four_letter(host, port, "srvr")
    except OSError:
        return False


class LocalZooKeeper:
    """One ZooKeeper server: ``start()`` returns when it serves (:func:`is_serving`); ``stop()`` kills our pid."""

    def __init__(self, data_dir: Path, port: int, host: str = "127.0.0.1") -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    def _command(self) -> list[str]:
        java = shutil.which("java")
        classpath = os.environ.get("SQUALL_ZOOKEEPER_CLASSPATH", DEBIAN_CLASSPATH)
        jars = [p for p in classpath.split(":") if p.endswith((".jar", "*"))]
        if java is None or not any(Path(p.rstrip("*")).exists() for p in jars):
            raise ZooKeeperUnavailable(
                "ZooKeeper needs Java and the ZooKeeper jars: on Debian run "
                "'apt-get install default-jre-headless zookeeper' (make test does it for you), "
                "or set SQUALL_ZOOKEEPER_CLASSPATH"
            )
        config = self.data_dir / "zoo.cfg"
        return [java, "-Xmx256m", f"-Dzookeeper.log.dir={self.data_dir}", "-cp", classpath, MAIN_CLASS, str(config)]

    def _write_config(self) -> None:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "zoo.cfg").write_text(
            "tickTime=2000\n"
            f"dataDir={self.data_dir / 'data'}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons\n"
            # short minimum session so tests can shorten storm.zookeeper.session.timeout
            "minSessionTimeout=1000\n"
        )

    def start(self, timeout: float = 30.0, log_file: Path | None = None) -> LocalZooKeeper:
        command = self._command()
        if not port_is_free(self.host, self.port):  # else `ruok` would be answered by whoever holds it
            raise ZooKeeperUnavailable(
                f"port {self.port} on {self.host} is already in use (another ZooKeeper?); "
                "pick another with -c storm.zookeeper.port=N"
            )
        self._write_config()
        with open(log_file or self.data_dir / "zookeeper.out", "ab") as out:  # the child keeps its own copy
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while not is_serving(self.host, self.port):
            if self.process.poll() is not None:
                raise ZooKeeperUnavailable(
                    f"ZooKeeper exited with code {self.process.returncode}; see {self.data_dir / 'zookeeper.out'}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise ZooKeeperUnavailable(f"ZooKeeper did not answer on {self.connect_string} within {timeout}s")
            time.sleep(0.05)  # polling a socket that is not up yet; there is nothing to wait on
        log.info("zookeeper started", address=self.connect_string, pid=self.process.pid, data_dir=str(self.data_dir))
        return self

    @property
    def pid(self) -> int:
        """The server's process id."""
        if self.process is None:
            raise ZooKeeperUnavailable("ZooKeeper was not started")
        return self.process.pid

    def wait(self) -> int:
        """Block until the server exits on its own; its exit code."""
        if self.process is None:
            raise ZooKeeperUnavailable("ZooKeeper was not started")
        return self.process.wait()

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM our pid, SIGKILL after ``grace`` seconds; never matches processes by name."""
        process, self.process = self.process, None
        if process is not None and stop_child(process, grace):
            log.info("zookeeper stopped", address=self.connect_string, pid=process.pid)

    def __enter__(self) -> LocalZooKeeper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
