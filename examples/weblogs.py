"""A small web-analytics pipeline: access-log lines → parse → per-window section stats in Spark SQL → JSON lines.

    access log (generated, or read from files)
      → parse        combined log format → (ts_ms, client, method, page, status, bytes);
                     lines that do not parse go to the "invalid" stream with the reason, never dropped
      → windows      Spark bolt: tumbling event-time windows, joined with a reference table mapping
                     pages to site sections; requests, 5xx responses and bytes per (window, section)
      → results      JSON lines: <out>/windows-<task>.jsonl, and <out>/invalid-<task>.jsonl

Lines travel in batches end to end: the spout emits each chunk of lines as one tuple tree
(``emit_many(rows, msg_id=...)``, replayed whole on failure), the parser takes a worker's batch of lines at a
time (``execute_batch``), and the Spark bolt anchors its output to the few chunk trees of its batch, not to
each of its thousands of lines. At-least-once: a failed Spark job replays whole chunks, so lines of them that
another job counted are counted again.

Each Spark batch emits partial sums for the windows it saw, so a window that spans batches has several
rows: :func:`window_totals` adds them up (``python -m examples.weblogs report OUT`` prints the newest).
Generated logs are deterministic (line ``i`` is :func:`log_line` ``(i)``), so :func:`expected_totals`
computes the exact answer in plain Python for the tests.

    storm jar examples/weblogs.py /tmp/weblogs 20000       # out dir, lines (omit for an endless stream)
    storm jar examples/weblogs.py /tmp/weblogs '"/var/log/nginx/access.log*"'   # read files instead
"""

from __future__ import annotations

import glob
import json
import re
import sys
import time
from collections import deque
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from squall import Bolt, SparkBolt, Spout, Topology, TopologyContext, Tuple, TupleBatch

#: The reference table the Spark bolt joins: a page (first path segment) → its site section.
SECTIONS = (
    ("/", "home"),
    ("/products", "shop"),
    ("/cart", "shop"),
    ("/checkout", "shop"),
    ("/blog", "content"),
    ("/docs", "content"),
    ("/api", "api"),
    ("/login", "account"),
    ("/account", "account"),
)
#: Generated traffic: paths (with pages the reference table does not know), statuses, clients.
PATHS = (
    "/",
    "/products/17",
    "/products/42",
    "/cart",
    "/checkout/pay",
    "/blog/streaming-101",
    "/docs/install",
    "/api/v1/orders",
    "/login",
    "/account/settings",
    "/favicon.ico",
    "/robots.txt",
)
STATUSES = (200, 200, 200, 200, 200, 200, 304, 301, 404, 500, 503, 200)
#: Generated event time starts here and advances 25 ms a line (40 lines per second of event time).
START_MS = 1_790_000_000_000
STEP_MS = 25
#: Every BAD_EVERY-th generated line is garbage, to exercise the invalid stream.
BAD_EVERY = 97

LINE = re.compile(
    r'(?P<client>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<method>[A-Z]+) (?P<path>\S+) [^"]*" '
    r"(?P<status>\d{3}) (?P<bytes>\d+|-)"
)
#: The time of a log line, ``10/Oct/2026:13:55:36 +0000`` with optional milliseconds after the seconds.
STAMP = re.compile(r"(\d{1,2})/([A-Z][a-z]{2})/(\d{4}):(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))? ([+-])(\d{2})(\d{2})$")
MONTHS = {
    name: i
    for i, name in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)
}


def sections_table() -> Any:
    """:data:`SECTIONS` as an Arrow table (page, section). From Arrow, Spark makes it a local relation of known
    size, so every job's join broadcasts it (no shuffle); from Python rows it would be an RDD of unknown size,
    joined with a shuffle and a sort of both sides per job."""
    import pyarrow as pa

    return pa.table({"page": [page for page, _ in SECTIONS], "section": [section for _, section in SECTIONS]})


def log_line(i: int) -> str:
    """Generated line ``i``: combined log format, or (every BAD_EVERY-th) a broken one."""
    if i % BAD_EVERY == BAD_EVERY - 1:
        return f"garbage line {i} -- not an access log entry"
    when = datetime.fromtimestamp((START_MS + i * STEP_MS) / 1000, tz=UTC)
    stamp = when.strftime("%d/%b/%Y:%H:%M:%S.") + f"{when.microsecond // 1000:03d} +0000"
    mix = (i * 2654435761) % 2**32  # Knuth's multiplicative hash: varied, but the same every run
    path, status = PATHS[mix % len(PATHS)], STATUSES[(mix >> 8) % len(STATUSES)]
    size = 0 if status in (301, 304) else 200 + (mix >> 16) % 5000
    return f'10.0.{i % 7}.{i % 251} - - [{stamp}] "GET {path} HTTP/1.1" {status} {size} "-" "Mozilla/5.0 (squall-demo)"'


def parse(line: str) -> tuple[int, str, str, str, int, int]:
    """``(ts_ms, client, method, page, status, bytes)`` of one log line; ValueError says why it is not one."""
    match = LINE.match(line)
    if match is None:
        raise ValueError("not in combined log format")
    client, text, method, path, status, size = match.groups()
    head, _, zone = text.partition(" ")
    second, dot, fraction = head.partition(".")
    try:
        if dot and not (fraction.isdecimal() and len(fraction) <= 6):  # what STAMP's (?:\.(\d{1,6}))? allows
            raise ValueError
        ts_ms = _second_ms(f"{second} {zone}") + (int(fraction.ljust(3, "0")[:3]) if fraction else 0)
    except ValueError:
        raise ValueError(f"bad timestamp {text!r}") from None
    page = "/" + path.lstrip("/").split("/", 1)[0].split("?", 1)[0]
    return ts_ms, client, method, page, int(status), 0 if size == "-" else int(size)


@lru_cache(maxsize=4096)
def _second_ms(stamp: str) -> int:
    """Epoch milliseconds of ``10/Oct/2026:13:55:36 +0000`` (a log time without its fraction), or ValueError.
    Cached: a log's lines share their seconds, and this is most of a line's parsing (strptime would cost 5x
    the rest of the line)."""
    match = STAMP.match(stamp)
    if match is None:
        raise ValueError(f"bad timestamp {stamp!r}")
    day, month, year, hour, minute, second, _, sign, tz_hours, tz_minutes = match.groups()
    try:
        utc = datetime(int(year), MONTHS[month], int(day), int(hour), int(minute), int(second), tzinfo=UTC)
    except KeyError:
        raise ValueError(f"bad month in {stamp!r}") from None
    offset_ms = (int(tz_hours) * 60 + int(tz_minutes)) * 60_000 * (1 if sign == "+" else -1)
    return int(utc.timestamp()) * 1000 - offset_ms


# ------------------------------------------------------------------------------------------------
# Components
# ------------------------------------------------------------------------------------------------


class AccessLogSpout(Spout):
    """Reliable, in chunks: each ``next_batch`` emits up to ``max_rows`` lines as one tuple tree (message id:
    the chunk's ``(first, stop)`` line numbers), replayed whole when any of its lines fails. ``next_tuple``
    (a per-tuple runtime's call) emits one line, its number as its message id. Failed ids are replayed before
    new lines; ``acked`` counts the lines whose trees completed.

    Lines come from ``files`` (a glob, read in name order, shared out over the spout's tasks: task ``i`` of
    ``n`` takes lines ``i``, ``i + n``, ...) or are generated (``lines`` of them, or endlessly when None).
    """

    outputs = ["line"]

    def __init__(self, lines: int | None = None, files: str | None = None) -> None:
        self.lines, self.files = lines, files

    def open(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        self.next, self.step = context.task_index, len(context.tasks)  # this task's next fresh line number
        if self.files is not None:
            self.text = [
                line.rstrip("\n")
                for path in sorted(glob.glob(self.files))
                for line in Path(path).read_text(errors="replace").splitlines()
            ]
            self.end: int | None = len(self.text)
        else:
            self.end = self.lines
        self.replays = deque[Any]()  # failed message ids: line numbers and (first, stop) chunks
        self.acked = 0  # lines whose trees completed

    def next_tuple(self) -> None:
        if self.replays:
            self._emit(self.replays.popleft())
        elif self.end is None or self.next < self.end:
            self._emit(self.next)
            self.next += self.step

    def next_batch(self, max_rows: int) -> None:
        if self.replays:
            self._emit(self.replays.popleft())
            return
        stop = self.next + max_rows * self.step
        if self.end is not None:
            stop = min(stop, self.end)
        if self.next < stop:
            self._emit((self.next, stop))
            self.next += len(range(self.next, stop, self.step)) * self.step

    def _emit(self, msg_id: int | tuple[int, int]) -> None:
        """The line numbered ``msg_id``, or the chunk's lines as one tree."""
        first, stop = (msg_id, msg_id + 1) if isinstance(msg_id, int) else msg_id
        if self.files is not None:
            lines = self.text[first : stop : self.step]
        else:
            lines = [log_line(i) for i in range(first, stop, self.step)]
        if isinstance(msg_id, int):
            self.emit(lines, msg_id=msg_id)
        else:
            self.emit_many([(line,) for line in lines], msg_id=msg_id)

    def ack(self, msg_id: int | tuple[int, int]) -> None:
        self.acked += 1 if isinstance(msg_id, int) else len(range(*msg_id, self.step))

    def fail(self, msg_id: int | tuple[int, int]) -> None:
        self.replays.append(msg_id)


class ParseLine(Bolt):
    """A parsed request on the default stream, or the line and what is wrong with it on ``invalid``; a worker's
    batch of lines at a time, each output anchored to its line."""

    outputs = {"default": ["ts_ms", "client", "method", "page", "status", "bytes"], "invalid": ["line", "reason"]}

    def execute(self, tup: Tuple) -> None:
        self.execute_batch(TupleBatch.of([tup]))

    def execute_batch(self, batch: TupleBatch) -> None:
        requests, parsed, invalid, unparsed = [], [], [], []
        for i, (line,) in enumerate(batch.values):
            try:
                requests.append(parse(line))
                parsed.append(i)
            except ValueError as exc:
                invalid.append((line, str(exc)))
                unparsed.append(i)
        self.emit_each(requests, inputs=batch, index=parsed)
        if invalid:
            self.emit_each(invalid, "invalid", inputs=batch, index=unparsed)


class SectionWindows(SparkBolt):
    """Requests, 5xx responses and bytes per tumbling window and site section (Spark SQL with a join)."""

    outputs = ["window_start_ms", "section", "requests", "server_errors", "bytes"]
    input_types = {"ts_ms": "int64", "status": "int64", "bytes": "int64"}

    def __init__(self, window_secs: int = 10) -> None:
        self.window_ms = window_secs * 1000

    def prepare_spark(self, spark: Any) -> None:
        self.sections = spark.createDataFrame(sections_table())

    def transform(self, batch: Any) -> Any:
        return self.spark.sql(
            """SELECT CAST(FLOOR(e.ts_ms / {window}) * {window} AS BIGINT) AS window_start_ms,
                      COALESCE(s.section, 'other') AS section,
                      COUNT(*) AS requests,
                      CAST(SUM(IF(e.status >= 500, 1, 0)) AS BIGINT) AS server_errors,
                      CAST(SUM(e.bytes) AS BIGINT) AS bytes
               FROM {events} e LEFT JOIN {sections} s ON e.page = s.page
               GROUP BY 1, 2""",
            window=self.window_ms,
            events=batch,
            sections=self.sections,
        )


class JsonLines(Bolt):
    """Appends each input as a JSON object (field → value) to ``<out_dir>/<name>-<task>.jsonl``."""

    def __init__(self, out_dir: str, name: str) -> None:
        self.out_dir, self.name = out_dir, name

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        Path(self.out_dir).mkdir(parents=True, exist_ok=True)
        self.out = open(Path(self.out_dir) / f"{self.name}-{context.task_id}.jsonl", "a")  # noqa: SIM115 (cleanup closes it)

    def execute(self, tup: Tuple) -> None:
        self.out.write(json.dumps(dict(zip(tup.fields, tup.values))) + "\n")
        self.out.flush()  # acked (auto_ack) only once it is written

    def cleanup(self) -> None:
        self.out.close()


def topology(
    out_dir: str = "weblogs-out", lines: int | None = None, files: str | None = None, window_secs: int = 10
) -> Topology:
    """The pipeline; ``out_dir`` is made absolute here, on the submitting machine."""
    out = str(Path(out_dir).resolve())
    # Pending room for three Spark batches: one in its job while the next fills (max.spout.pending counts rows).
    t = Topology(
        "weblogs",
        {
            "topology.workers": 2,
            "topology.max.spout.pending": 15000,
            "spark.batch.size": 5000,
            "spark.batch.interval.ms": 1000,
        },
    )
    logs = t.spout("access-log", AccessLogSpout, kwargs={"lines": lines, "files": files})
    parsed = t.bolt("parse", ParseLine, parallelism=2).shuffle(logs)
    windows = t.bolt("windows", SectionWindows, args=[window_secs]).shuffle(parsed)
    t.bolt("results", JsonLines, args=[out, "windows"]).global_(windows)
    t.bolt("invalid", JsonLines, args=[out, "invalid"]).global_(parsed, stream="invalid")
    return t


# ------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------

Totals = dict[tuple[int, str], dict[str, int]]


def read_jsonl(out_dir: str | Path, name: str) -> list[dict[str, Any]]:
    """Every complete row the ``name`` sink tasks have written so far."""
    return [
        json.loads(line)
        for path in sorted(Path(out_dir).glob(f"{name}-*.jsonl"))
        for line in path.read_text().splitlines()
        if line.endswith("}")
    ]  # not a line half written


def window_totals(out_dir: str | Path) -> Totals:
    """(window start ms, section) → requests, server_errors, bytes: the partial rows added up."""
    totals: Totals = {}
    for row in read_jsonl(out_dir, "windows"):
        into = totals.setdefault(
            (row["window_start_ms"], row["section"]), {"requests": 0, "server_errors": 0, "bytes": 0}
        )
        for key in into:
            into[key] += row[key]
    return totals


def expected_totals(lines: Iterable[str], window_secs: int = 10) -> Totals:
    """What :func:`window_totals` must come to for ``lines``, computed without Squall or Spark."""
    sections, window_ms = dict(SECTIONS), window_secs * 1000
    totals: Totals = {}
    for line in lines:
        try:
            ts_ms, _client, _method, page, status, size = parse(line)
        except ValueError:
            continue
        into = totals.setdefault(
            (ts_ms // window_ms * window_ms, sections.get(page, "other")),
            {"requests": 0, "server_errors": 0, "bytes": 0},
        )
        into["requests"] += 1
        into["server_errors"] += status >= 500
        into["bytes"] += size
    return totals


def report(out_dir: str | Path, windows: int = 2) -> str:
    """The newest ``windows`` windows' rows as a table, and a line about all of them."""
    totals = window_totals(out_dir)
    shown = sorted({start for start, _ in totals})[-windows:]
    rows = [f"{'window (UTC)':<20} {'section':<8} {'requests':>8} {'5xx':>5} {'bytes':>10}"]
    for (start, section), t in sorted(totals.items()):
        if start in shown:
            when = datetime.fromtimestamp(start / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
            rows.append(f"{when:<20} {section:<8} {t['requests']:>8} {t['server_errors']:>5} {t['bytes']:>10}")
    requests = sum(t["requests"] for t in totals.values())
    rows.append(
        f"{len({start for start, _ in totals})} windows, {requests} requests, "
        f"{len(read_jsonl(out_dir, 'invalid'))} invalid lines"
    )
    return "\n".join(rows)


def wait(out_dir: str | Path, lines: int, timeout: float) -> bool:
    """Whether the results for ``lines`` generated lines are complete and exact within ``timeout`` seconds."""
    expected = expected_totals(log_line(i) for i in range(lines))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if window_totals(out_dir) == expected:
            return True
        time.sleep(0.5)
    return False


if __name__ == "__main__":
    command = sys.argv[1:2]
    if command == ["report"] and len(sys.argv) == 3:
        if not Path(sys.argv[2]).is_dir():
            sys.exit(f"{sys.argv[2]}: no such directory (the OUT_DIR given to storm jar examples/weblogs.py)")
        print(report(sys.argv[2]))
    elif command == ["wait"] and len(sys.argv) == 5:
        if not wait(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])):
            sys.exit(f"the results in {sys.argv[2]} are not (yet) those of {sys.argv[3]} generated lines")
        print(f"results complete: every one of {sys.argv[3]} lines counted, exactly as computed in plain Python")
    else:
        sys.exit("usage: python -m examples.weblogs report OUT_DIR | wait OUT_DIR LINES TIMEOUT_SECS")
