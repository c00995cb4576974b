"""What shell spouts and bolts share (:class:`ShellHost`): starting the subprocess, the handshake, the messages
both get (``pid``, ``log``, ``error``, ``metrics``), timeouts, and death (report, fail, restart with backoff)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import structlog

from squall.api.metrics import MetricError, TaskMetrics
from squall.core.environment import user_code_environment, with_own_scripts
from squall.core.restarts import BACKOFF_MAX_SECS, restart_delay_secs
from worker.executor.base import Executor
from worker.multilang.process import ShellProcess, resolve_command
from worker.multilang.protocol import JSON, LOG_LEVELS, MultilangError, codec_for, context_for, handshake

__all__ = ["ShellHost"]

log = structlog.get_logger(__name__)


class ShellHost(Executor):
    """The part of a shell spout's or bolt's executor that hosts its subprocess; the subclass mixes it with
    :class:`~worker.executor.spout.SpoutExecutor` or :class:`~worker.executor.bolt.BoltExecutor`."""

    #: The user metrics: each name a ``metrics`` message gives becomes a gauge of its last ``params``
    #: (Storm hands them to an IShellMetric registered in Java; here they ride the heartbeat as user gauges).
    metrics: TaskMetrics

    def _shell_init(self) -> None:
        shell = self.spec.obj.shell
        # The runtime hosts only shell components here, and nimbus accepts none without its command.
        assert shell is not None and shell.execution_command, "a shell component with its execution_command"
        self._command, self._script = shell.execution_command, shell.script
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
        self.metrics = TaskMetrics()
        self._metric_values: dict[str, Any] = {}
        #: Subprocesses started so far (the first and every restart).
        self.launches = 0

    # The task thread steps this executor when ``due`` has come or its inbox has input: a reply from the
    # subprocess must bring it too, with no race against the thread writing ``due`` after a step.
    @property
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
        return [resolve_command(self._command, env)] + ([self._script] if self._script else [])

    def _shell_start(self) -> None:
        """The first subprocess (on the task thread): a bad serializer or a missing command stops the task."""
        self._codec = codec_for(self.spec.conf, self._script or "")
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
        self._process = ShellProcess(
            self._argv(env), cwd, env, self._codec, wake=wake, label=f"{self.component}:{self.task}"
        )
        self.launches += 1
        self._process.send(
            self._encode(handshake(conf, context_for(self._layout, self.component, self.task), self._pid_dir))
        )
        self._process.flush()
        self._last_heard = now
        log.info(
            "shell component started",
            component=self.component,
            task=self.task,
            pid=self._process.pid,
            argv=self._process.argv,
            cwd=str(cwd),
            serializer=self._codec.name,
        )

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
            self._died(
                now,
                f"subprocess heartbeat timeout: nothing from it for {now - self._last_heard:.1f}s "
                f"(topology.subprocess.timeout.secs {self._timeout:g})",
            )
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
        argv = process.argv if process is not None else [self._command]
        text = (
            f"shell {self.spec.kind.value} {self.component!r} (task {self.task}, pid "
            f"{process.pid if process else '-'}, {' '.join(argv)}): {reason} (exit code {code}); "
            f"{lost} in-flight tuples {self._LOST}, restarting it {f'in {delay:g}s' if delay else 'now'} "
            f"({self._failures} failures in a row)"
        )
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
