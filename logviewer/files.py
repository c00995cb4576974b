"""What the logviewer reads: the files of one log directory, a bounded page of one, a search within one.

A file is named relative to the directory (``wordcount-1-1700000000-worker-6700.log``). The name is checked
before anything is opened: one that leads outside the directory — ``..``, an absolute path, a symlink out
of it — is :class:`Refused`, whether or not what it points at exists. Every read is bounded: a page is at
most :data:`MAX_PAGE` bytes, a search reads at most :data:`SEARCH_BUDGET` bytes per request and says where
to go on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: A page's length when none is asked for (Storm's logviewer shows 51,200 bytes).
DEFAULT_PAGE = 51_200
#: The longest page one request reads.
MAX_PAGE = 1 << 20
#: A search string's most bytes (Storm's limit).
MAX_SEARCH = 1024
#: Matches one search returns by default, and at most.
DEFAULT_MATCHES, MAX_MATCHES = 10, 100
#: Bytes shown before and after a match (Storm's).
CONTEXT = 128
#: Bytes one search request reads at most; its ``next`` offset goes on from there.
SEARCH_BUDGET = 64 << 20
CHUNK = 1 << 20


class LogError(Exception):
    """A request the log directory cannot answer; ``status`` is its HTTP status."""

    status = 400


class Refused(LogError):
    """The name leads outside the log directory."""

    status = 403


class NoSuchLog(LogError):
    """No such file in the log directory."""

    status = 404


@dataclass(frozen=True)
class Page:
    """Bytes ``start`` up to ``end`` of a file that was ``size`` bytes long when read."""

    name: str
    start: int
    end: int
    size: int
    data: bytes


@dataclass(frozen=True)
class Match:
    """A match at byte ``offset``, with up to :data:`CONTEXT` bytes either side."""

    offset: int
    before: bytes
    match: bytes
    after: bytes


@dataclass(frozen=True)
class Search:
    """The matches of one search from ``start``; ``next`` is where the next search goes on (None: the end of the
    file was reached)."""

    name: str
    start: int
    matches: list[Match]
    next: int | None


class LogDir:
    """The log directory one logviewer serves::

    logs = LogDir(Path("/var/log/squall"))
    logs.names()                                   # ['wc-1-1700000000-worker-6700.log', ...]
    logs.page("wc-1-1700000000-worker-6700.log")   # its last 51,200 bytes
    logs.search("wc-1-1700000000-worker-6700.log", b"Traceback")
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, name: str) -> Path:
        """The file ``name`` names: :class:`Refused` when it leads outside the directory, :class:`NoSuchLog`
        when it is not a file there."""
        root = self.root.resolve()
        if not name or "\0" in name:
            raise LogError("give a log file's name (file=NAME), as /api/v1/listLogs lists them")
        resolved = (root / name).resolve()
        if not resolved.is_relative_to(root) or resolved == root:
            raise Refused(f"{name!r} is not in the log directory; only the files /api/v1/listLogs lists are served")
        if not resolved.is_file():
            raise NoSuchLog(f"no log file {name!r}; /api/v1/listLogs lists them")
        return resolved

    def names(self) -> list[str]:
        """Every file in the directory (and below it), by name, sorted; none when it does not exist yet."""
        if not self.root.is_dir():
            return []
        root = self.root.resolve()
        return sorted(
            p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.resolve().is_relative_to(root)
        )

    def page(self, name: str, start: int | None = None, length: int = DEFAULT_PAGE) -> Page:
        """``length`` bytes from ``start``, or the last ``length`` bytes when ``start`` is None. A start past the
        end reads nothing from the end: a reader following a file that was truncated sees ``start`` go back."""
        if not 1 <= length <= MAX_PAGE:
            raise LogError(f"length must be 1 to {MAX_PAGE} bytes, got {length}")
        if start is not None and start < 0:
            raise LogError(f"start must be a byte offset >= 0, got {start}")
        with open(self.path(name), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            begin = max(0, size - length) if start is None else min(start, size)
            data = os.pread(f.fileno(), min(length, size - begin), begin)
        return Page(name, begin, begin + len(data), size, data)

    def search(self, name: str, needle: bytes, *, start: int = 0, matches: int = DEFAULT_MATCHES) -> Search:
        """Up to ``matches`` occurrences of ``needle`` from byte ``start``, reading at most :data:`SEARCH_BUDGET`
        bytes."""
        if not 1 <= len(needle) <= MAX_SEARCH:
            raise LogError(f"the search string must be 1 to {MAX_SEARCH} bytes (UTF-8), got {len(needle)}")
        if not 1 <= matches <= MAX_MATCHES:
            raise LogError(f"num-matches must be 1 to {MAX_MATCHES}, got {matches}")
        if start < 0:
            raise LogError(f"start-byte-offset must be >= 0, got {start}")
        found: list[Match] = []
        with open(self.path(name), "rb") as f:
            fd = f.fileno()
            size, offset = os.fstat(fd).st_size, start
            stop = min(size, start + SEARCH_BUDGET)
            while offset < stop and len(found) < matches:
                span = min(CHUNK, stop - offset)
                # Read past the span by the needle's length less one, so a match is never cut in two; a match
                # starting past the span is the next round's.
                chunk = os.pread(fd, span + len(needle) - 1, offset)
                at = chunk.find(needle)
                while -1 < at < span and len(found) < matches:
                    hit = offset + at
                    before = os.pread(fd, min(CONTEXT, hit), max(0, hit - CONTEXT))
                    found.append(Match(hit, before, needle, os.pread(fd, CONTEXT, hit + len(needle))))
                    at = chunk.find(needle, at + 1)
                offset += span
            if len(found) == matches:
                offset = found[-1].offset + 1
        return Search(name, start, found, offset if offset < size else None)
