"""Helpers shared by tests: waiting on conditions with deadlines instead of sleeping."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError

from squall.core.config.loading import load_config
from squall.core.zk import paths
from squall.core.zk.client import ZkClient, connect_string
from squall.core.zk.records import TaskError
from squall.dev.cluster import wait_for
from squall.dev.zookeeper import free_port, port_is_free
from worker.layout import Placement
from worker.runtime import WorkerRuntime

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent

#: The documentation a test runs: every Python and shell block of these pages (a directory: its pages) is executed
#: by tests/test_docs.py (Python) or tests/test_readme.py (shell), unless the page gives it to another test with
#: ``<!-- run by tests/test_x.py -->`` on the line before it (a block that needs that test's cluster or server).
#: README.md may mark a block ``<!-- not run: WHY -->``; Getting started and the Guide may not.
RUN_DOCS = ("README.md", "docs/getting-started", "docs/guide")
#: The pages whose shell lines, in this order, are tests/test_readme.py's session against a dev cluster.
SESSION_PAGES = ("docs/getting-started/install.md", "docs/getting-started/dev-cluster.md")


@dataclass(frozen=True)
class CodeBlock:
    """A fenced code block of a Markdown page: its language (``python``, ``sh``...), its code, why it is not run
    when the line before it says so (``<!-- not run: WHY -->``), and the test file that runs it when that line
    names one (``<!-- run by tests/test_x.py -->``) instead of tests/test_docs.py or tests/test_readme.py."""

    page: str
    lang: str
    code: str
    not_run: str | None
    run_by: str | None = None

    @property
    def run_by_default(self) -> bool:
        """Whether tests/test_docs.py (Python) or tests/test_readme.py's session (shell) runs it."""
        return self.not_run is None and self.run_by is None


_FENCE = re.compile(r"(?:^<!-- (?:not run: (?P<why>.+?)|run by (?P<by>\S+)) -->\n)?"
                    r"^```(?P<lang>[\w-]*)\n(?P<code>.*?)^```$", re.M | re.S)


def run_doc_pages() -> list[Path]:
    """The pages of :data:`RUN_DOCS`, in a stable order."""
    found: list[Path] = []
    for name in RUN_DOCS:
        path = REPO / name
        found += sorted(path.glob("*.md")) if path.is_dir() else [path]
    return found


def code_blocks(page: Path) -> list[CodeBlock]:
    """The page's fenced code blocks, in order."""
    name = str(page.relative_to(REPO))
    return [CodeBlock(name, m["lang"], m["code"], m["why"], m["by"]) for m in _FENCE.finditer(page.read_text())]


def blocks_run_by(test_file: str, page: str) -> list[CodeBlock]:
    """The blocks of ``page`` (relative to the checkout) that it gives to ``test_file`` (``__file__`` of the test)."""
    test = str(Path(test_file).resolve().relative_to(REPO))
    blocks = [block for block in code_blocks(REPO / page) if block.run_by == test]
    assert blocks, f"{page} gives no block to {test} (<!-- run by {test} -->)"
    return blocks


def command_lines(code: str) -> list[str]:
    """The command lines of a shell block: comment-only lines dropped, a trailing ``  # comment`` stripped (no
    documented command has a ``#`` of its own)."""
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in code.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def shell_lines(page: Path) -> list[str]:
    """The command lines of the page's ``sh`` blocks that tests/test_readme.py's session runs."""
    return [line for block in code_blocks(page) if block.lang == "sh" and block.run_by_default
            for line in command_lines(block.code)]


def storm_on_path(bin_dir: Path) -> dict[str, str]:
    """An environment whose ``storm`` on PATH is this checkout's CLI, run the way users run it (an executable
    named ``storm``); a shim for ``python -m squall.cli``, since a virtualenv's console script may predate it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "storm"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m squall.cli "$@"\n')
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO)}


def dev_cluster_env(tmp: Path, supervisors: int = 2) -> tuple[dict[str, str], list[int]]:
    """The environment of a user's shell for ``storm dev-cluster``, and the ports that cluster will listen on.

    This checkout's ``storm`` is on PATH, and ``$STORM_CONF_DIR/storm.yaml`` (so no ``~/.storm`` of the
    machine's gets in) keeps every default — unless another process holds a default port (ZooKeeper 2181,
    nimbus 6627, the UI 8080, the logviewer 8000, slots from 6700), when it moves the ports alone; ``storm.local.dir`` always stays
    the relative default.
    """
    env = storm_on_path(tmp / "bin")
    conf_dir = tmp / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    env["STORM_CONF_DIR"] = str(conf_dir)
    defaults = load_config(env={})
    slots = len(defaults["supervisor.slots.ports"])

    def ports(zookeeper: int, nimbus: int, ui: int, logviewer: int, first_slot: int) -> list[int]:
        return [zookeeper, nimbus, ui, logviewer, *range(first_slot, first_slot + supervisors * slots)]

    wanted = ports(defaults["storm.zookeeper.port"], defaults["nimbus.thrift.port"], defaults["ui.port"],
                   defaults["logviewer.port"], defaults["supervisor.slots.ports"][0])
    def usable(candidate: list[int]) -> bool:
        return len(set(candidate)) == len(candidate) and all(port_is_free("127.0.0.1", p) for p in candidate)

    if usable(wanted):
        (conf_dir / "storm.yaml").write_text("# the defaults\n")
        return env, wanted
    while not usable(wanted := ports(free_port(), free_port(), free_port(), free_port(), free_port())):
        pass
    (conf_dir / "storm.yaml").write_text(json.dumps({
        "storm.zookeeper.port": wanted[0], "nimbus.thrift.port": wanted[1], "ui.port": wanted[2],
        "logviewer.port": wanted[3], "supervisor.slots.ports": wanted[4:4 + slots]}))
    return env, wanted


def log_events(path: Path, *events: str) -> list[dict[str, Any]]:
    """The JSON log lines of a daemon or worker log whose event is one of ``events``, in order."""
    return [e for line in path.read_text().splitlines()
            if line.startswith("{") and (e := json.loads(line)).get("event") in events]


def stop_or_kill(process: subprocess.Popen[Any], sig: int, timeout: float = 60) -> None:
    """End a CLI process a test started the way its user would (Ctrl-C's SIGINT, ``stop``'s SIGTERM), so it stops
    what it started in turn, and kill it only if that takes over ``timeout`` s: a failed assertion must not leave
    its ZooKeeper or cluster running (SIGKILL alone ends the parent and orphans its children)."""
    if process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_until(condition: Callable[[], T], timeout: float = 10.0, what: str = "condition") -> T:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` at the deadline. It asks less often
    the longer it waits (a twentieth of the wait so far, see :func:`~squall.dev.cluster.wait_for`): a cluster asked
    for a minute is asked about a hundred times, not three thousand, and a wait is seen over at most 5 % late."""
    return wait_for(condition, timeout, what, backoff=0.05)


def task_errors(zk: ZkClient, topology_id: str, task: int) -> list[TaskError]:
    """The errors filed for ``task``, oldest first. A writer drops the oldest beyond the last few as it files one,
    so an error listed may be gone when read: it is left out, not read as None."""
    return [error for key in zk.children(paths.task_errors(topology_id, task))
            if (error := zk.read(paths.task_error(topology_id, task, int(key)), TaskError)) is not None]


def filed_errors(zk: ZkClient, topology_id: str) -> dict[int, list[str]]:
    """Each task's filed error texts, oldest first, for the tasks that have one. A writer creates a task's node
    before its first error, so a task node alone is not yet an error: wait on this, not on the task nodes."""
    errors = {int(task): [e.error for e in task_errors(zk, topology_id, int(task))]
              for task in zk.children(paths.task_errors_root(topology_id))}
    return {task: texts for task, texts in errors.items() if texts}


def expire_session(client: ZkClient, zk_address: str) -> None:
    """Expire ``client``'s session for real: a second connection takes the session over and closes it."""
    session_id, password = client.kazoo.client_id
    thief = KazooClient(hosts=zk_address, client_id=(session_id, password))
    thief.start(timeout=10)
    thief.stop()
    thief.close()


def delete_tree(zk_address: str, path: str, auth_data: list[tuple[str, str]] | None = None) -> None:
    """Remove a test's ZooKeeper subtree (its chroot), whoever created it (with ZooKeeper auth, as ``auth_data``)."""
    bare = KazooClient(hosts=zk_address, auth_data=auth_data)
    bare.start(timeout=10)
    try:
        bare.delete(path, recursive=True)
    except NoNodeError:
        pass
    finally:
        bare.stop()
        bare.close()


@contextmanager
def chroot_conf(zk_address: str) -> Iterator[dict[str, Any]]:
    """Cluster conf on ``zk_address`` under a root of its own, removed on the way out (what ``zk_conf`` gives a
    test, for a cluster that several tests share)."""
    host, port = zk_address.rsplit(":", 1)
    root = f"/squall-test/{uuid.uuid4().hex[:12]}"
    conf = load_config(env={})
    conf.update({
        "storm.zookeeper.servers": [host],
        "storm.zookeeper.port": int(port),
        "storm.zookeeper.root": root,
        "storm.zookeeper.session.timeout": 4000,
        "storm.zookeeper.connection.timeout": 5000,
    })
    try:
        yield conf
    finally:
        delete_tree(zk_address, root)


def remove_as_daemons(daemon_conf: dict[str, Any]) -> None:
    """Delete the test's root with the daemons' ZooKeeper credential (the fixture that would has none)."""
    delete_tree(connect_string(daemon_conf, with_root=False), daemon_conf["storm.zookeeper.root"],
                [("digest", daemon_conf["storm.zookeeper.auth.payload"])])


def open_parent_of_root(conf: dict[str, Any]) -> None:
    """Create the test root's parent open: daemons with ZooKeeper auth would create it with their ACL, and other
    tests' roots go beside this one."""
    bare = KazooClient(hosts=connect_string(conf, with_root=False))
    bare.start(timeout=10)
    try:
        bare.ensure_path(conf["storm.zookeeper.root"].rsplit("/", 1)[0] or "/")
    finally:
        bare.stop()
        bare.close()


def znodes_under(zk: KazooClient, path: str = "/") -> list[str]:
    """Every znode below ``path`` (the session's chroot by default)."""
    below = [f"{path.rstrip('/')}/{child}" for child in zk.get_children(path)]
    return below + [node for child in below for node in znodes_under(zk, child)]


def readable(zk: KazooClient, nodes: Sequence[str]) -> list[str]:
    """The nodes whose data or children the session may read (ZooKeeper answers the others NoAuth)."""
    found = []
    for node in nodes:
        for read in (zk.get, zk.get_children):
            try:
                read(node)
            except NoAuthError:
                continue
            found.append(node)
            break
    return found


def start_nimbus(conf: dict[str, Any], local_dir: Path, **extra: Any) -> subprocess.Popen[bytes]:
    """``storm nimbus`` as a process on ``conf``'s ZooKeeper, on a free port (see :func:`listening_port`),
    logging JSON to ``<local_dir>.log``; ``extra`` are more ``-c`` settings. The caller kills it."""
    overrides = {
        "storm.zookeeper.servers": conf["storm.zookeeper.servers"], "storm.zookeeper.port": conf["storm.zookeeper.port"],
        "storm.zookeeper.root": conf["storm.zookeeper.root"],
        "storm.zookeeper.session.timeout": conf["storm.zookeeper.session.timeout"],
        "storm.local.dir": str(local_dir), "storm.local.hostname": "127.0.0.1", "nimbus.thrift.port": 0,
        "nimbus.thrift.bind.address": "127.0.0.1", "squall.log.format": "json", **extra,
    }
    argv = [sys.executable, "-m", "squall.cli"]
    for key, value in overrides.items():
        argv += ["-c", f"{key}={json.dumps(value)}"]
    log = open(local_dir.with_suffix(".log"), "wb")
    return subprocess.Popen([*argv, "nimbus"], stdout=log, stderr=subprocess.STDOUT)


def listening_port(log_file: Path) -> int | None:
    """The port a nimbus process reported in its JSON log, once it has started."""
    for line in log_file.read_text(errors="replace").splitlines():
        if line.startswith("{") and (entry := json.loads(line)).get("event") == "nimbus started":
            return int(entry["port"])
    return None


def listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs process ``pid`` listens on over TCP, as ``ss -ltnp`` shows them."""
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN}


def other_address() -> str | None:
    """An IPv4 address of this host that is not loopback, if it has one: what a client on another host uses."""
    return next((a.address for addresses in psutil.net_if_addrs().values() for a in addresses
                 if a.family == socket.AF_INET and not a.address.startswith("127.")), None)


def make_certs(directory: Path, *clients: str) -> Path:
    """A CA in ``directory`` (``ca.pem``) and, by ``deploy/make-certs.sh``, ``nimbus.pem`` (a nimbus certificate
    for 127.0.0.1 and localhost) and ``<client>.pem`` for each client principal."""
    script = REPO / "deploy" / "make-certs.sh"
    for argv in (["ca"], ["nimbus", "nimbus", "localhost", "127.0.0.1"], *(["client", c] for c in clients)):
        subprocess.run([str(script), str(directory), *argv], check=True, capture_output=True, timeout=60)
    return directory


def tls_conf(certs: Path, client: str, *, server: str = "nimbus") -> dict[str, Any]:
    """The conf keys of mutual TLS with the certificates of :func:`make_certs`: nimbus serves with ``server``'s,
    clients present ``client``'s."""
    return {"nimbus.thrift.tls.server.keystore.path": str(certs / f"{server}.pem"),
            "nimbus.thrift.tls.server.truststore.path": str(certs / "ca.pem"),
            "nimbus.thrift.client.use.tls": True,
            "nimbus.thrift.tls.client.keystore.path": str(certs / f"{client}.pem"),
            "nimbus.thrift.tls.client.truststore.path": str(certs / "ca.pem")}


def python_for_other_users() -> tuple[str | None, str]:
    """A ``supervisor.worker.python`` other users can run Squall's workers on — this Python, else the system's
    of the same minor version (Debian's /usr/bin/python3.11 when this one is pyenv's under /root, 0700) — and,
    when there is none, why (what a test that needs one skips with)."""
    from squall.core.config.validation import ConfigError
    from supervisor.runas import closed_to_others, interpreter
    from supervisor.venvs import base_interpreter
    why = []
    for python in dict.fromkeys([sys.executable, "/usr/bin/python%d.%d" % sys.version_info[:2]]):
        if not Path(python).exists():
            why.append(f"{python} is not installed")
            continue
        try:
            base = base_interpreter({"supervisor.worker.python": python})
        except ConfigError as exc:
            why.append(str(exc))
            continue
        closed = [(path, found) for path in interpreter(base) if (found := closed_to_others(path)) is not None]
        if not closed:
            return python, ""
        why.append(f"other users cannot enter {closed[0][1]} (on the way to {closed[0][0]}) to run {python}")
    return None, "; ".join(why)


@contextmanager
def two_workers(layout: Any, conf: dict, halves: Sequence[set[int]]) -> Iterator[list[Any]]:
    """Two started, connected and active WorkerRuntimes over loopback TCP, ``halves[i]`` the tasks of the i-th;
    stopped on the way out."""
    ports = [free_port(), free_port()]
    runtimes = [WorkerRuntime(layout, Placement(frozenset(mine), {task: ("127.0.0.1", ports[1 - i])
                                                                  for task in halves[1 - i]}),
                              conf, report_error=lambda *_: None, listen=("127.0.0.1", ports[i]))
                for i, mine in enumerate(halves)]
    try:
        for runtime in runtimes:
            runtime.start()
        for runtime in runtimes:
            assert runtime.wait_for_peers(10, threading.Event()) == frozenset()
            runtime.set_active(True)
        yield runtimes
    finally:
        for runtime in runtimes:
            runtime.stop()
