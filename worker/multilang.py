"""Shell (multilang) spouts and bolts: subprocesses speaking Storm's multilang protocol, as pystorm,
streamparse and Storm's own storm.py / storm.js speak it.

A ``shell`` component (``ShellComponent``: ``execution_command`` and ``script``) runs as the process
``[execution_command, script]``, the command found on the worker's ``PATH`` (the ``bin/`` of the Python the
worker runs on comes first there: a per-topology virtualenv's, else the supervisor's), in the code package's
``resources/`` directory, with the worker's allow-listed environment. Its executor is a
:class:`~worker.executor.spout.SpoutExecutor` or :class:`~worker.executor.bolt.BoltExecutor` whose user code is the
subprocess, so routing, anchoring, acking, stats and errors are the ones Python components get.

The protocol, from the worker's side (JSON messages each ended by a line ``end``, or MessagePack objects
back to back when ``topology.multilang.serializer`` names a MessagePack serializer):

* handshake: ``{"conf", "pidDir", "context"}`` → the child creates ``<pidDir>/<pid>`` and answers ``{"pid"}``;
* bolt: each input goes as ``{"id", "comp", "stream", "task", "tuple"}``; the child answers, whenever it likes,
  ``emit`` (``anchors`` = input ids, ``stream``, ``task`` for a direct emit, ``need_task_ids``), ``ack``,
  ``fail``, ``log``, ``error``, ``metrics`` and ``sync``; every second a heartbeat tuple (stream
  ``__heartbeat``, task -1) asks for a ``sync``;
* spout: ``next``, ``ack``, ``fail``, ``activate``, ``deactivate`` commands, each answered by ``emit``\\ s (with
  an ``id`` when reliable), ``log``, ``error``, ``metrics`` and a closing ``sync``. Commands are pipelined: the
  acks that came back since the last round go in one write with the ``next``;
* a non-direct emit is answered with the list of task ids it went to unless it says ``"need_task_ids": false``.

When the child stops answering for ``topology.subprocess.timeout.secs`` (default
``supervisor.worker.timeout.secs``), exits or breaks the protocol, it is killed, the error is reported like
any component error (``/taskerrors``, the UI), the bolt's in-flight tuples fail (their spouts replay them) and
a new subprocess starts after the crash backoff supervisors use for workers (:mod:`squall.core.restarts`);
with ``topology.worker.exit.on.error`` the worker stops instead, as Storm's does.

The codecs and messages are :mod:`worker.multilang_protocol` (pure); this module is the subprocess adapter
(:class:`ShellProcess`) and the executors. The hot path: one reader thread per subprocess decodes what it writes (stdout, and stderr lines into the
log) and wakes the task thread; the task thread encodes a round's inputs and writes them in one
non-blocking write, holding at most ``topology.shellbolt.max.pending`` unwritten tuples.

    t.shell_bolt("split", command="node", script="splitsentence.js", outputs=["word"]).shuffle(spout)
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from itertools import count
from pathlib import Path
from typing import Any

import structlog

from squall.core.environment import user_code_environment, with_own_scripts
from squall.api.metrics import MetricError, TaskMetrics
from squall.core.restarts import BACKOFF_MAX_SECS, restart_delay_secs
from squall.api.tuple import Tuple, tick_tuple
from worker.executor.base import Executor
from worker.executor.bolt import BoltExecutor
from worker.executor.spout import SpoutExecutor
from worker.multilang_protocol import (JSON, LOG_LEVELS, Codec, MultilangError, codec_for, command, context_for,
                                       emit_target, handshake, heartbeat_message, tuple_message)

log = structlog.get_logger(__name__)

#: How often a shell bolt asks its subprocess for a ``sync`` (Storm: every second).
HEARTBEAT_EVERY_SECS = 1.0
#: Lines of a subprocess's stderr kept to explain its death.
STDERR_TAIL_LINES = 20


# -- the subprocess -------------------------------------------------------------------------------


def resolve_command(command: str, env: Mapping[str, str]) -> str:
    """``command`` found on the environment's ``PATH`` (a path with a slash is used as it is)."""
    if os.sep in command:
        return command
    found = shutil.which(command, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(f"shell component command {command!r} is not on the worker's PATH "
                                f"({env.get('PATH', '')}): install it there or give its full path")
    return found


class ShellProcess:
    """One subprocess and its pipes: :meth:`send` queues bytes that :meth:`flush` writes without blocking;
    a reader thread decodes stdout into :attr:`replies` and logs stderr, calling ``wake`` on news.

        process = ShellProcess(["node", "split.js"], cwd, env, JSON, wake=thread_wake.set, label="split:3")
        process.send(JSON.encode(handshake(conf, context, pid_dir)))
        process.flush()
    """

    def __init__(self, argv: list[str], cwd: Path, env: Mapping[str, str], codec: Codec, *,
                 wake: Callable[[], None], label: str) -> None:
        self.argv = argv
        self.label = label
        self.replies: deque[Any] = deque()
        #: Set when stdout ends (the child exited or closed it) or it wrote what the codec cannot read.
        self.ended = False
        self.problem: str | None = None
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self.started = time.monotonic()
        self._decoder = codec.decoder()
        self._wake = wake
        self._queued: list[bytes] = []
        self._unwritten = bytearray()
        self._popen = subprocess.Popen(argv, cwd=cwd, env=dict(env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, bufsize=0, close_fds=True)
        self.pid = self._popen.pid
        os.set_blocking(self._popen.stdin.fileno(), False)  # type: ignore[union-attr]
        self._reader = threading.Thread(target=self._read, name=f"multilang-{label}", daemon=True)
        self._reader.start()

    def send(self, data: bytes) -> None:
        self._queued.append(data)

    @property
    def unwritten(self) -> int:
        """Bytes queued or written only in part (the child is not reading fast enough)."""
        return len(self._unwritten) + sum(map(len, self._queued))

    def flush(self) -> bool:
        """Write what is queued, as much as the pipe takes now; True when all of it is written."""
        if self._queued:
            self._unwritten += b"".join(self._queued)
            self._queued.clear()
        fd = self._popen.stdin.fileno()  # type: ignore[union-attr]
        while self._unwritten:
            try:
                written = os.write(fd, self._unwritten)
            except BlockingIOError:
                return False
            except OSError as exc:  # the child closed stdin or died: the reader sees its stdout end
                self.problem = self.problem or f"writing to it failed: {exc}"
                self._unwritten.clear()
                return True
            del self._unwritten[:written]
        return True

    def _read(self) -> None:
        out, err = self._popen.stdout, self._popen.stderr
        selector = selectors.DefaultSelector()
        selector.register(out, selectors.EVENT_READ)  # type: ignore[arg-type]
        selector.register(err, selectors.EVENT_READ)  # type: ignore[arg-type]
        partial = b""
        try:
            while not self.ended:
                for key, _ in selector.select():
                    data = os.read(key.fd, 1 << 16)
                    if key.fileobj is err:
                        if not data:
                            selector.unregister(err)  # type: ignore[arg-type]
                            continue
                        *lines, partial = (partial + data).split(b"\n")
                        for line in lines:
                            text = line.decode(errors="replace")
                            self.stderr_tail.append(text)
                            log.info("shell component stderr", component=self.label, pid=self.pid, line=text)
                        continue
                    if not data:
                        self.ended = True
                        break
                    try:
                        self.replies.extend(self._decoder.feed(data))
                    except MultilangError as exc:
                        self.problem = str(exc)
                        self.ended = True
                    self._wake()
        except (OSError, ValueError):  # closed under us by kill()
            self.ended = True
        finally:
            selector.close()
            self._wake()

    def alive(self) -> bool:
        return self._popen.poll() is None

    def kill(self, grace: float = 0.0) -> int | None:
        """Reap the child, killed (SIGKILL) unless it exits by itself within ``grace`` seconds; its exit code
        (negative: the signal that ended it)."""
        try:
            self._popen.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                self._popen.kill()
            except ProcessLookupError:
                pass
        try:
            code = self._popen.wait(10)
        except subprocess.TimeoutExpired:
            code = None
        self._reader.join(5)
        for stream in (self._popen.stdin, self._popen.stdout, self._popen.stderr):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        return code

    def exit_code(self) -> int | None:
        return self._popen.poll()


# -- the executors ----------------------------------------------------------------------------------


class _ShellHost(Executor):
    """What shell spouts and bolts share: starting the subprocess, the handshake, the messages both get
    (``pid``, ``log``, ``error``, ``metrics``), timeouts, and death (report, fail, restart with backoff)."""

    def _shell_init(self) -> None:
        conf = self.spec.conf
        timeout = conf.get("topology.subprocess.timeout.secs") or conf["supervisor.worker.timeout.secs"]
        self._timeout = float(timeout)
        self._codec = JSON
        self._process: ShellProcess | None = None
        self._pid: int | None = None
        self._pid_dir: str | None = None
        self._last_heard = 0.0
        self._failures = 0
        self._restart_at = 0.0
        self._due = 0.0
        #: The user metrics: each name a ``metrics`` message gives becomes a gauge of its last ``params``
        #: (Storm hands them to an IShellMetric registered in Java; here they ride the heartbeat as user gauges).
        self.metrics = TaskMetrics()
        self._metric_values: dict[str, Any] = {}
        #: Subprocesses started so far (the first and every restart).
        self.launches = 0

    # The task thread steps this executor when ``due`` has come or its inbox has input: a reply from the
    # subprocess must bring it too, with no race against the thread writing ``due`` after a step.
    @property  # type: ignore[override]
    def due(self) -> float:
        process = self._process
        return 0.0 if process is not None and (process.replies or process.ended) else self._due

    @due.setter
    def due(self, value: float) -> None:
        self._due = value

    @property
    def pid(self) -> int | None:
        """The subprocess's pid as it said in the handshake (None before it answered)."""
        return self._pid

    def _argv(self, env: Mapping[str, str]) -> list[str]:
        shell = self.spec.obj.shell
        return [resolve_command(shell.execution_command, env)] + ([shell.script] if shell.script else [])

    def _shell_start(self) -> None:
        """The first subprocess (on the task thread): a bad serializer or a missing command stops the task."""
        self._codec = codec_for(self.spec.conf, self.spec.obj.shell.script or "")
        self._encode = self._codec.encoder()
        self._now = time.monotonic()
        self._launch(self._now)

    def _launch(self, now: float) -> None:
        """Start the subprocess and send the handshake; it is running once it answers with its pid."""
        conf = self.spec.conf
        env = with_own_scripts(user_code_environment(os.environ, extra=conf.get("supervisor.worker.env.allow") or ()))
        cwd = self.env.resources_dir or Path.cwd()
        self._pid_dir = tempfile.mkdtemp(prefix=f"squall-pids-{self.task}-")
        self._pid = None
        wake = self.inbox.wake.set
        self._process = ShellProcess(self._argv(env), cwd, env, self._codec, wake=wake,
                                     label=f"{self.component}:{self.task}")
        self.launches += 1
        self._process.send(self._encode(handshake(conf, context_for(self._layout, self.component, self.task),
                                                  self._pid_dir)))
        self._process.flush()
        self._last_heard = now
        log.info("shell component started", component=self.component, task=self.task, pid=self._process.pid,
                 argv=self._process.argv, cwd=str(cwd), serializer=self._codec.name)

    def _running(self, now: float) -> ShellProcess | None:
        """The subprocess once it has answered the handshake; starts one when its restart time has come."""
        process = self._process
        if process is None:
            if now >= self._restart_at:
                try:
                    self._launch(now)
                except OSError as exc:
                    self._died(now, f"could not start: {exc}")
            return None
        if self._pid is None:
            try:
                for message in self._take(process):
                    if isinstance(message, dict) and "pid" in message:
                        self._pid = int(message["pid"])
                        self._on_running()
                        break
                    self._on_message(message)
                else:
                    self._check(process, now, waiting=True)
                    return None
            except MultilangError as exc:
                self._died(now, str(exc))
                return None
        return process

    def _take(self, process: ShellProcess) -> Iterable[Any]:
        """The replies received so far, each marking the subprocess alive."""
        replies = process.replies
        if replies:
            self._last_heard = self._now
        while replies:
            yield replies.popleft()

    def _on_running(self) -> None:
        """The handshake is done."""

    def _on_message(self, message: Any) -> None:
        """A message neither spouts nor bolts handle themselves."""
        if not isinstance(message, dict):
            raise MultilangError(f"unexpected message {message!r}")
        name = message.get("command")
        if name == "log":
            level = LOG_LEVELS.get(message.get("level", 2), 20)
            log.log(level, str(message.get("msg")), component=self.component, task=self.task, pid=self._pid)
        elif name == "error":
            self.report_error(f"Shell Process Exception: {message.get('msg')}")
        elif name == "metrics":
            if not message.get("name"):
                raise MultilangError(f"metrics without a name: {message!r}")
            self._set_metric(str(message["name"]), message.get("params"))
        elif name is None:
            raise MultilangError(f"a message without a command: {message!r}")
        else:
            self.report_error(f"shell component {self.component!r} sent an unknown command {name!r}: {message!r}")

    def _set_metric(self, name: str, value: Any) -> None:
        """A ``metrics`` message: the gauge ``name`` reads ``value`` from now on (registered the first time; a
        name over a limit is reported once, a value that is not a number when the heartbeat reads it)."""
        if name not in self._metric_values:
            try:
                self.metrics.register_gauge(name, partial(self._metric_values.__getitem__, name))
            except MetricError as exc:
                self.report_error(f"shell {self.spec.kind.value} {self.component!r}: {exc}")
        self._metric_values[name] = value

    def _check(self, process: ShellProcess, now: float, *, waiting: bool) -> bool:
        """False (and the subprocess killed) if it died, broke the protocol or, while ``waiting`` on it, said
        nothing for the subprocess timeout."""
        if (process.ended or process.problem) and not process.replies:  # its last words are read first
            self._died(now, process.problem)
            return False
        if waiting and now - self._last_heard > self._timeout:
            self._died(now, f"subprocess heartbeat timeout: nothing from it for {now - self._last_heard:.1f}s "
                            f"(topology.subprocess.timeout.secs {self._timeout:g})")
            return False
        return True

    def _died(self, now: float, reason: str | None) -> None:
        """Kill the subprocess, fail what it held, report it, and start another after the backoff. ``reason``
        None: its stdout ended (it exited, or is exiting: it gets a second to do so)."""
        process, self._process = self._process, None
        code, tail, lived = None, "", 0.0
        if process is not None:
            code = process.kill(grace=1.0 if reason is None else 0.0)
            tail = "\n".join(process.stderr_tail)
            lived = now - process.started
        if reason is None:
            reason = f"exited with code {code}" if code is None or code >= 0 else f"died of signal {-code}"
        if self._pid_dir:
            shutil.rmtree(self._pid_dir, ignore_errors=True)
            self._pid_dir = None
        lost = self._lose_in_flight()
        self._failures = 1 if lived >= BACKOFF_MAX_SECS else self._failures + 1
        delay = restart_delay_secs(self._failures)
        self._restart_at = now + delay
        argv = process.argv if process is not None else [self.spec.obj.shell.execution_command]
        text = (f"shell {self.spec.kind.value} {self.component!r} (task {self.task}, pid "
                f"{process.pid if process else '-'}, {' '.join(argv)}): {reason} (exit code {code}); "
                f"{lost} in-flight tuples {self._LOST}, restarting it {f'in {delay:g}s' if delay else 'now'} "
                f"({self._failures} failures in a row)")
        if tail:
            text += f"\nits last stderr lines:\n{tail}"
        error = MultilangError(text)
        self.report_error(text)
        if self._exit_on_error:
            self.env.on_fatal(error)

    #: What became of the tuples a dead subprocess had in flight (said in the error).
    _LOST = "failed"

    def _lose_in_flight(self) -> int:
        """Settle what the dead subprocess held; how many tuples that was."""
        return 0

    def _stop_process(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
        if self._pid_dir:
            shutil.rmtree(self._pid_dir, ignore_errors=True)
            self._pid_dir = None

    def _wake_in(self, now: float, *deadlines: float) -> float:
        return max(0.0, min(self._next_beat, *deadlines) - now)


class ShellBoltExecutor(_ShellHost, BoltExecutor):
    """A shell bolt: inputs written to the subprocess as they come (at most ``topology.shellbolt.max.pending``
    unwritten), its emits anchored to the inputs it names, its acks and fails passed on, a heartbeat tuple
    every second."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shell_init()
        self._max_pending = int(self.spec.conf["topology.shellbolt.max.pending"])
        self._ids = count(1)
        #: Input id (as sent) → (tuple, when it was sent): what the subprocess still has to ack or fail.
        self._in_flight: dict[str, tuple[Tuple, float]] = {}
        self._next_heartbeat = 0.0

    def start(self) -> None:
        self._shell_start()
        if self._tick_every:
            self._next_tick = self._now + self._tick_every

    def step(self, now: float) -> float:
        self._now = now
        self._heartbeat(now)
        process = self._running(now)
        if process is None:
            self._acks.flush(self._outbox)
            return self._wake_in(now, self._restart_at if self._process is None else
                                 self._last_heard + self._timeout + 0.01)
        for message in self._take(process):
            self._on_reply(message, process)
            if self._process is not process:  # it died of that message
                self._acks.flush(self._outbox)
                return 0.0
        if not self._check(process, now, waiting=True):
            self._acks.flush(self._outbox)
            return 0.0
        if now >= self._next_tick:
            self._next_tick = now + self._tick_every  # type: ignore[operator]
            self._send(process, tick_tuple(self._tick_every))  # type: ignore[arg-type]
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + HEARTBEAT_EVERY_SECS
            process.send(self._encode(heartbeat_message(f"hb{next(self._ids)}")))
        if not process.unwritten:  # the child read all we wrote: a round of up to max.pending more
            take, stats, sent = self.inbox.take, self.stats, 0
            while sent < self._max_pending and (batch := take()) is not None:
                sent += len(batch)
                stats.executed += len(batch)
                for tup in batch.views():
                    self._send(process, tup)
        written = process.flush()
        self._acks.flush(self._outbox)
        if not written or self.inbox.size:
            return 0.001 if not written else 0.0
        return self._wake_in(now, self._next_heartbeat, self._next_tick, self._last_heard + self._timeout + 0.01)

    def _send(self, process: ShellProcess, tup: Tuple) -> None:
        tuple_id = str(next(self._ids))
        self._in_flight[tuple_id] = (tup, self._now)
        process.send(self._encode(tuple_message(tuple_id, tup)))

    def _on_reply(self, message: Any, process: ShellProcess) -> None:
        try:
            name = message.get("command") if isinstance(message, dict) else None
            if name == "emit":
                self._on_emit(message, process)
            elif name == "ack" or name == "fail":
                entry = self._in_flight.pop(str(message.get("id")), None)
                if entry is None:
                    raise MultilangError(f"{name}ed a non-existent or already acked/failed id: {message.get('id')!r}")
                tup, sent = entry
                self.stats.execute_secs += self._now - sent
                if name == "ack":
                    self.ack(tup)
                else:
                    self.fail(tup)
            elif name != "sync":
                self._on_message(message)
        except MultilangError as exc:
            self._died(self._now, str(exc))

    def _on_emit(self, message: Mapping[str, Any], process: ShellProcess) -> None:
        values, stream, direct, wanted = emit_target(message)
        anchors = []
        for anchor in message.get("anchors") or ():
            entry = self._in_flight.get(str(anchor))
            if entry is None:
                raise MultilangError(f"anchored onto {anchor!r} after ack/fail (or an id never sent)")
            anchors.append(entry[0])
        try:
            targets = self.emit(values, stream, tuple(anchors), direct, None)
        except ValueError as exc:
            self.report_error(f"shell bolt {self.component!r} emitted what it cannot: {exc}")
            targets = []
        if wanted:
            process.send(self._encode(list(targets)))

    def _raised_on(self, tup: Tuple) -> bool:
        """A tuple fails as an exception when its subprocess died (crashed or hung) holding it."""
        return self._process is None

    def _lose_in_flight(self) -> int:
        lost, self._in_flight = self._in_flight, {}
        for tup, _ in lost.values():
            self.fail(tup)
        return len(lost)

    def close(self) -> None:
        self._stop_process()
        self._acks.flush(self._outbox)


class _Commands:
    """The spout the executor sees: its acks, fails and (de)activations become commands to the subprocess."""

    def __init__(self) -> None:
        self.queued: list[dict[str, Any]] = []

    def ack(self, msg_id: Any) -> None:
        self.queued.append(command("ack", msg_id))

    def fail(self, msg_id: Any) -> None:
        self.queued.append(command("fail", msg_id))

    def activate(self) -> None:
        self.queued.append(command("activate"))

    def deactivate(self) -> None:
        self.queued.append(command("deactivate"))


class ShellSpoutExecutor(_ShellHost, SpoutExecutor):
    """A shell spout: ``next`` when the topology is active and the pending cap allows, the round's acks and
    fails in the same write, every command answered by ``sync``; a ``next`` that emits nothing backs off
    ``topology.sleep.spout.wait.strategy.time.ms`` as Python spouts do."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shell_init()
        self._commands = _Commands()
        self.spout = self._commands  # type: ignore[assignment]
        self._on_ack, self._on_fail = self._commands.ack, self._commands.fail
        #: Commands written and not yet answered by ``sync``; the ``next`` among them, and what was emitted before.
        self._unsynced = 0
        self._next_sent: int | None = None

    def start(self) -> None:
        self._shell_start()

    def _next_tuples(self, now: float) -> float:
        process = self._running(now)
        if process is None:
            return self._wake_in(now, self._restart_at if self._process is None else
                                 self._last_heard + self._timeout + 0.01)
        for message in self._take(process):
            self._on_reply(message, process)
            if self._process is not process:
                return 0.0
        if self._acked_at_emit:
            self._ack_emitted()
        if not self._check(process, now, waiting=self._unsynced > 0):
            return 0.0
        if self._unsynced:
            process.flush()
            return self._wake_in(now, self._last_heard + self._timeout + 0.01)
        commands = self._commands.queued
        if (self._active and now >= self._next_emit and not self.env.pressure.hold_spouts and self.pending.can_emit()):
            commands.append(command("next"))
            self._next_sent = self.stats.emitted
        if commands:
            self._commands.queued = []
            process.send(b"".join(map(self._encode, commands)))
            self._unsynced = len(commands)
            self._last_heard = now  # waiting on it from now (Storm's markWaitingSubprocess)
        process.flush()
        if self._unsynced:
            return self._wake_in(now, self._last_heard + self._timeout + 0.01)
        if self._active and now < self._next_emit:
            return self._next_emit - now
        return self._idle_secs if self._active and self.env.pressure.hold_spouts else self._wait(now)

    def _on_reply(self, message: Any, process: ShellProcess) -> None:
        try:
            name = message.get("command") if isinstance(message, dict) else None
            if name == "sync":
                self._unsynced = max(0, self._unsynced - 1)
                if not self._unsynced and self._next_sent is not None:
                    if self.stats.emitted == self._next_sent:  # nothing to emit: Storm's sleep wait strategy
                        self._next_emit = self._now + self._idle_secs
                    self._next_sent = None
            elif name == "emit":
                values, stream, direct, wanted = emit_target(message)
                try:
                    targets = self.emit(values, stream, (), direct, message.get("id"))
                except ValueError as exc:
                    self.report_error(f"shell spout {self.component!r} emitted what it cannot: {exc}")
                    targets = []
                if wanted:
                    process.send(self._encode(list(targets)))
            else:
                self._on_message(message)
        except MultilangError as exc:
            self._died(self._now, str(exc))

    _LOST = "forgotten (the new subprocess knows none of their ids)"

    def _lose_in_flight(self) -> int:
        """A new subprocess knows nothing of the old one's message ids: forget its pending trees (neither acked
        nor failed to the new one) and its unanswered commands."""
        lost = self.pending.forget()
        self._unsynced, self._next_sent = 0, None
        self._commands.queued = []  # the new one is activated once it answers the handshake
        return lost

    def _on_running(self) -> None:
        if self._active and not any(c["command"] == "activate" for c in self._commands.queued):
            self._commands.queued.insert(0, command("activate"))

    def set_active(self, active: bool) -> None:
        if active == self._active:
            return
        self._active = active
        (self._commands.activate if active else self._commands.deactivate)()

    def close(self) -> None:
        process = self._process
        if process is not None and self._active and self._pid is not None:
            process.send(self._encode(command("deactivate")))
            process.flush()
        self._stop_process()
        self._acks.flush(self._outbox)

