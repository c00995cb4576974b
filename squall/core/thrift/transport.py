"""What both ends of a Nimbus connection share under the contract: framed transport with a size cap, the
checks of their settings, and how a Thrift failure reads.

thriftpy2's framed transports trust a frame's length header; Storm's cap it at nimbus.thrift.max_buffer_size.
Here frames are size-capped before any memory is set aside for them, on both ends.
"""

from __future__ import annotations

from typing import Any

from thriftpy2.transport import TFramedTransportFactory, TTransportException

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "BoundedFramedTransportFactory",
    "FrameSizeError",
    "check_frame_cap",
    "check_timeout",
    "describe",
    "frame_refusal",
]

DEFAULT_MAX_FRAME_BYTES = 1_048_576  # nimbus.thrift.max_buffer_size, Storm's default: what nimbus reads

_MAX_I32 = 2**31 - 1


def check_frame_cap(max_frame_bytes: int) -> None:
    """Refuse a frame cap a 4-byte signed length cannot announce."""
    if not 0 < max_frame_bytes <= _MAX_I32:
        raise ValueError(f"max_frame_bytes must be in 1..{_MAX_I32}, got {max_frame_bytes}")


def check_timeout(name: str, value: int | None) -> None:
    """Refuse a timeout of 0 or less: thriftpy2 reads 0 as "no timeout", which turns a typo into a client that
    can hang forever."""
    if value is not None and value <= 0:
        raise ValueError(f"{name} must be positive milliseconds or None (no limit), got {value}")


def describe(exc: BaseException) -> str:
    """A failure as one line, its type and its text (thriftpy2 exceptions print as their repr; their
    ``message`` reads better)."""
    text = getattr(exc, "message", None) or getattr(exc, "msg", None) or str(exc)
    return f"{type(exc).__name__}: {text}"


def frame_refusal(size: int, cap: int, setting: str) -> str:
    """Why a frame announcing ``size`` bytes was refused, naming the ``setting`` that caps it."""
    return (
        f"refused a Thrift frame of {size} bytes: frames must hold 1 to {cap} bytes "
        f"({setting}); is the peer speaking framed transport?"
    )


class FrameSizeError(TTransportException):
    """A peer announced an empty, negative or over-the-cap frame; its connection is dropped."""


class _FrameGuard:
    """Sits between a framed transport and its socket and checks each frame header as it arrives.

    thriftpy2's framed transports trust the 4-byte length and allocate that much (the Cython one
    mallocs it outright), so one bogus header can pin gigabytes or park a thread forever. The
    guard follows the frame boundaries in the byte stream itself, which works with both the
    Cython and the pure-Python framed transport and keeps the fast binary protocol usable.
    """

    def __init__(self, trans: Any, max_frame_bytes: int) -> None:
        self._trans = trans
        self._max = max_frame_bytes
        self._header = bytearray()
        self._left = 0  # payload bytes still to come in the current frame
        self._refused: str | None = None  # set once a bad header is seen; the stream is dead

    def read(self, sz: int) -> bytes:
        if self._refused is None:
            data = self._trans.read(sz)
            keep = self._scan(data)
            if keep == len(data):
                return data
            if keep:  # hand over the frames before the bad header; refuse on the next read
                return data[:keep]
        raise FrameSizeError(TTransportException.UNKNOWN, self._refused)

    def _scan(self, data: bytes) -> int:
        """Follow frame boundaries through ``data``; return how many bytes may be passed on."""
        pos, end = 0, len(data)
        while pos < end:
            if self._left:
                step = min(self._left, end - pos)
                self._left -= step
                pos += step
                continue
            start = pos
            need = 4 - len(self._header)
            self._header += data[pos : pos + need]
            pos += need
            if len(self._header) < 4:
                break
            size = int.from_bytes(self._header, "big", signed=True)
            self._header.clear()
            if size <= 0 or size > self._max:
                self._refused = frame_refusal(size, self._max, "nimbus.thrift.client.max_buffer_size")
                return start
            self._left = size
        return end

    def write(self, buf: bytes) -> None:
        self._trans.write(buf)

    def flush(self) -> None:
        self._trans.flush()

    def is_open(self) -> bool:
        return self._trans.is_open()

    def open(self) -> None:
        self._trans.open()

    def close(self) -> None:
        self._trans.close()


class BoundedFramedTransportFactory:
    """Framed transport that refuses frames declaring <= 0 or more than ``max_frame_bytes``.

    Storm's servers and clients cap frames at nimbus.thrift.max_buffer_size; thriftpy2 has no
    cap at all. Squall's clients use it in place of ``TFramedTransportFactory``, with their own
    cap on replies (nimbus.thrift.client.max_buffer_size); nimbus reads requests itself.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        check_frame_cap(max_frame_bytes)
        self.max_frame_bytes = max_frame_bytes
        self._framed = TFramedTransportFactory()

    def get_transport(self, trans: Any) -> Any:
        return self._framed.get_transport(_FrameGuard(trans, self.max_frame_bytes))
