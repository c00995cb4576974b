"""``storm logs NAME [COMPONENT] [-f] [-b BYTES]``: a topology's worker logs, read over HTTP from the logviewer of
each worker's host (``logviewer.port``), as the UI links them; over HTTPS at ``logviewer.https.port`` when that is
set, presenting the client certificate the CLI shows nimbus (``nimbus.thrift.tls.client.*``).

Nimbus says where the topology's workers run (``getTopologyInfoByName``: each executor's host and port); with
a COMPONENT, only the workers running its tasks. Each log is printed whole (or its last BYTES, from the start
of the line they begin in) under a ``==> host:port (components) <==`` header, as ``tail`` heads several files;
``-f`` then follows them all, a header marking each switch from one log to another, until Ctrl-C. Lines are
printed as :func:`squall.core.logs.readable` shows them (``--json``: as the files hold them). A worker whose
logviewer cannot be reached is reported on stderr (and the exit code is 1) while the others are printed; when
following, it is tried again every poll.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO
from urllib.parse import urlencode

from squall.cli.options import positive
from squall.core.local_state import worker_log_name
from squall.core.logs import readable_text
from squall.core.names import is_system
from squall.core.nimbus_client import nimbus_client
from squall.core.thrift import storm
from squall.core.tls import client_context

#: Bytes asked for in one request (the logviewer's largest page).
PAGE = 1 << 20
#: How far back ``-b`` looks for the start of the line its first byte is in.
LINE_BACK = 64 << 10
#: Seconds between polls of a followed log.
FOLLOW_SECS = 1.0
#: Seconds one request to a logviewer may take.
TIMEOUT_SECS = 10.0


class LogsError(ValueError):
    """What the operator asked for is not in the topology (a component)."""


class Unreachable(OSError):
    """A logviewer did not answer, or refused the request; the message says which and why."""


@dataclass
class WorkerLog:
    """One worker's log on its host's logviewer, and how far it has been printed."""

    host: str
    port: int
    components: list[str]
    url: str  # its logviewer's /api/v1/read, file included
    tls: ssl.SSLContext | None = field(default=None, compare=False)  # for an https:// url
    offset: int | None = None  # the next byte to read; None: not read yet
    partial: bytes = field(default=b"", repr=False)  # a line read but not yet ended, held until it is
    problem: str | None = field(default=None, compare=False)

    @property
    def header(self) -> str:
        return f"==> {self.host}:{self.port} ({', '.join(self.components)}) <=="


def worker_logs(
    info: Any, logviewer_port: int, component: str | None = None, *, tls: ssl.SSLContext | None = None
) -> list[WorkerLog]:
    """The logs of a ``TopologyInfo``'s workers (those running ``component``'s tasks, when given), by host and
    port, over HTTPS with ``tls``; :class:`LogsError` names the topology's components when it has no
    ``component``."""
    workers: dict[tuple[str, int], set[str]] = {}
    for e in info.executors:
        workers.setdefault((e.host, e.port), set()).add(e.component_id)
    if component is not None:
        known = sorted({c for cs in workers.values() for c in cs if not is_system(c)})
        if component not in known:
            raise LogsError(
                f"topology {info.name} runs no component {component!r}; its components are "
                f"{', '.join(known) or 'none yet'}"
            )
        workers = {w: cs for w, cs in workers.items() if component in cs}
    return [
        WorkerLog(
            host,
            port,
            sorted(c for c in components if not is_system(c)),
            f"{'https' if tls else 'http'}://{host}:{logviewer_port}/api/v1/read?"
            + urlencode({"file": worker_log_name(info.id, port)}),
            tls=tls,
        )
        for (host, port), components in sorted(workers.items())
    ]


def _read(log: WorkerLog, start: int | None, length: int) -> tuple[bytes, int, int]:
    """Bytes of the log from ``start`` (None: its last ``length``): (data, where they start, the file's size)."""
    query = f"&length={length}" + (f"&start={start}" if start is not None else "")
    try:
        with urllib.request.urlopen(log.url + query, timeout=TIMEOUT_SECS, context=log.tls) as response:
            return response.read(), int(response.headers["X-Log-Start"]), int(response.headers["X-Log-Size"])
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read())["errorMessage"]
        except (ValueError, KeyError):
            reason = str(exc)
        raise Unreachable(f"{log.host}:{log.port}: the logviewer answered {exc.code}: {reason}") from None
    except (OSError, ValueError, TypeError) as exc:
        key = "logviewer.https.port" if log.tls else "logviewer.port"
        raise Unreachable(
            f"{log.host}:{log.port}: cannot read its log from the logviewer at "
            f"{log.url.split('/api')[0]} ({key}; is `storm logviewer` running on {log.host}?): {exc}"
        ) from None


def catch_up(
    log: WorkerLog,
    out: BinaryIO,
    last_header: list[str | None],
    first_bytes: int | None = None,
    *,
    raw: bool = False,
    final: bool = True,
) -> None:
    """Print what the log holds past ``log.offset`` (on a first read: all of it, or the lines holding its last
    ``first_bytes``), under its header unless it was the last one printed; a log that shrank is printed again
    from its start. Lines are :func:`readable` unless ``raw``; a line not yet ended is held for the next call
    unless ``final``."""
    while True:
        if log.offset is None:
            log.offset = 0 if first_bytes is None else _line_start(log, first_bytes)
        data, start, size = _read(log, log.offset, PAGE)
        if start < log.offset:  # truncated or replaced under us
            log.offset, log.partial = None, b""
            continue
        log.offset = start + len(data)
        shown = data if raw else _readable(log, data, final and log.offset >= size)
        if shown and last_header[0] != log.header:
            out.write(f"{log.header}\n".encode())
            last_header[0] = log.header
        out.write(shown)
        out.flush()
        if log.offset >= size or not data:
            return


def _line_start(log: WorkerLog, last: int) -> int:
    """Where the line holding the log's ``last``-th byte from its end starts: what ``-b`` prints begins there,
    never in the middle of a line (unless that line is longer than :data:`LINE_BACK`)."""
    _, _, size = _read(log, None, 1)
    window = max(0, size - last)
    if window == 0:
        return 0
    before, start, _ = _read(log, max(0, window - LINE_BACK), min(window, LINE_BACK))
    cut = before.rfind(b"\n")
    return start + cut + 1 if cut >= 0 else 0 if start == 0 else window


def _readable(log: WorkerLog, data: bytes, end: bool) -> bytes:
    """The whole lines of ``log`` that ``data`` ends, readable; the rest held in ``log.partial`` unless ``end``."""
    held = log.partial + data
    whole = len(held) if end else held.rfind(b"\n") + 1
    log.partial = held[whole:]
    return readable_text(held[:whole].decode("utf-8", "replace")).encode()


def logs(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """``storm logs NAME [COMPONENT] [-f] [-b BYTES]``."""
    https = conf.get("logviewer.https.port") is not None
    port = int(conf["logviewer.https.port" if https else "logviewer.port"])
    tls = (client_context(conf) or ssl.create_default_context()) if https else None
    try:
        with nimbus_client(conf) as nimbus:
            try:
                info = nimbus.getTopologyInfoByName(args.name)
            except storm.NotAliveException:
                hosts = sorted({s.host for s in nimbus.getClusterInfo().supervisors})
                logviewers = ", ".join(f"{'https' if https else 'http'}://{host}:{port}/" for host in hosts)
                print(
                    f"storm logs: no topology named {args.name!r} is running (storm list shows those that are); "
                    f"the logs of a killed one stay with the logviewer of each host it ran on"
                    f"{': ' + logviewers if logviewers else ''}",
                    file=sys.stderr,
                )
                return 1
            found = worker_logs(info, port, args.component, tls=tls)
    except LogsError as exc:
        print(f"storm logs: {exc}", file=sys.stderr)
        return 1
    if not found:
        print(f"storm logs: {args.name} has no workers running yet", file=sys.stderr)
        return 1
    out, failed = sys.stdout.buffer, False
    last_header: list[str | None] = [None]
    try:
        while True:
            for log in found:
                try:
                    catch_up(log, out, last_header, args.bytes, raw=args.json, final=not args.follow)
                    log.problem = None
                except Unreachable as exc:
                    failed = True
                    if log.problem != str(exc):  # said once, until it changes or the log is reachable again
                        print(f"storm logs: {exc}", file=sys.stderr, flush=True)
                    log.problem = str(exc)
            if not args.follow:
                return 1 if failed else 0
            time.sleep(FOLLOW_SECS)  # a poll: nothing to wait on but the files growing on other hosts
    except KeyboardInterrupt:
        return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``storm logs``'s arguments."""
    parser.add_argument("name", metavar="NAME", help="the topology")
    parser.add_argument(
        "component", nargs="?", metavar="COMPONENT", help="only the workers running this component's tasks"
    )
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing what they log, until Ctrl-C")
    parser.add_argument(
        "-b",
        "--bytes",
        type=positive,
        metavar="N",
        help="only the last N bytes of each log, from the start of the line they begin in (default: all of it)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="the lines as the log files hold them: JSON records, for tools (default: readable lines)",
    )
