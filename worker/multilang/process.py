"""One shell component's subprocess and its pipes: started, written to without blocking, read by a thread of
its own, reaped. What the messages mean is the executors' business (:mod:`worker.multilang.host`)."""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from worker.multilang.protocol import Codec, MultilangError

__all__ = ["STDERR_TAIL_LINES", "ShellProcess", "resolve_command"]

log = structlog.get_logger(__name__)

#: Lines of a subprocess's stderr kept to explain its death.
STDERR_TAIL_LINES = 20


def resolve_command(command: str, env: Mapping[str, str]) -> str:
    """``command`` found on the environment's ``PATH`` (a path with a slash is used as it is)."""
    if os.sep in command:
        return command
    found = shutil.which(command, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(
            f"shell component command {command!r} is not on the worker's PATH "
            f"({env.get('PATH', '')}): install it there or give its full path"
        )
    return found


class ShellProcess:
    """One subprocess and its pipes: :meth:`send` queues bytes that :meth:`flush` writes without blocking;
    a reader thread decodes stdout into :attr:`replies` and logs stderr, calling ``wake`` on news.

        process = ShellProcess(["node", "split.js"], cwd, env, JSON, wake=thread_wake.set, label="split:3")
        process.send(JSON.encode(handshake(conf, context, pid_dir)))
        process.flush()
    """

    def __init__(
        self, argv: list[str], cwd: Path, env: Mapping[str, str], codec: Codec, *, wake: Callable[[], None], label: str
    ) -> None:
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
        self._popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            close_fds=True,
        )
        self.pid = self._popen.pid
        stdin, stdout, stderr = self._popen.stdin, self._popen.stdout, self._popen.stderr
        assert stdin and stdout and stderr, "Popen opens the three pipes asked for"
        self._pipes = (stdin, stdout, stderr)
        os.set_blocking(stdin.fileno(), False)
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
        fd = self._pipes[0].fileno()
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
        _, out, err = self._pipes
        selector = selectors.DefaultSelector()
        selector.register(out, selectors.EVENT_READ)
        selector.register(err, selectors.EVENT_READ)
        partial = b""
        try:
            while not self.ended:
                for key, _ in selector.select():
                    data = os.read(key.fd, 1 << 16)
                    if key.fileobj is err:
                        if not data:
                            selector.unregister(err)
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
        for stream in self._pipes:
            try:
                stream.close()
            except OSError:
                pass
        return code

    def exit_code(self) -> int | None:
        return self._popen.poll()
