"""The shell spout's executor: ``next``, ``ack``, ``fail`` and (de)activation as commands to the subprocess,
pipelined one round per write, each answered by ``sync`` (Storm's ShellSpout)."""

from __future__ import annotations

from typing import Any

from worker.executor.spout import SpoutExecutor
from worker.multilang.host import ShellHost
from worker.multilang.process import ShellProcess
from worker.multilang.protocol import MultilangError, command, emit_target

__all__ = ["ShellSpoutExecutor"]


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


class ShellSpoutExecutor(ShellHost, SpoutExecutor):
    """A shell spout: ``next`` when the topology is active and the pending cap allows, the round's acks and
    fails in the same write, every command answered by ``sync``; a ``next`` that emits nothing backs off
    ``topology.sleep.spout.wait.strategy.time.ms`` as Python spouts do."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shell_init()
        self._commands = _Commands()
        self.spout = self._commands  # type: ignore[assignment]  # the subprocess is the spout: commands stand in for it
        self._on_ack, self._on_fail = self._commands.ack, self._commands.fail
        #: Commands written and not yet answered by ``sync``; the ``next`` among them, and what was emitted before.
        self._unsynced = 0
        self._next_sent: int | None = None

    def start(self) -> None:
        self._shell_start()

    def _next_tuples(self, now: float) -> float:
        process = self._running(now)
        if process is None:
            return self._wake_in(
                now, self._restart_at if self._process is None else self._last_heard + self._timeout + 0.01
            )
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
        if self._active and now >= self._next_emit and not self.env.pressure.hold_spouts and self.pending.can_emit():
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
