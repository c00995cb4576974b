"""Topology code on nimbus's disk: the upload inbox, the per-topology store, and download sessions.

Clients only ever hold opaque strings (an upload location, a download session id); every one is
looked up in a table, never turned into a filesystem path, so no client string can reach outside
these directories. Uploads are size-bounded and sessions expire on the injected clock.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shutil
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from squall.core.clock import Clock
from squall.core.local_state import CODE_FILES
from squall.core.thrift import from_bytes, storm, to_bytes

_TOPOLOGY_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}-\d+-\d+$")
#: Open sessions allowed at once, per inbox and per download table: each holds a file handle.
MAX_SESSIONS = 256


class UploadError(Exception):
    """An upload call that cannot be honoured (unknown or expired location, over a quota, not a zip, out of order).

    Its text names the upload by file name only, never by a path on nimbus's disk: clients see it.
    """


class DownloadError(Exception):
    """An unknown or expired download session."""


class MissingTopology(KeyError):
    def __str__(self) -> str:
        return f"no stored code for topology {self.args[0]!r}"


class UnknownArtifact(KeyError):
    def __str__(self) -> str:
        return f"unknown artifact {self.args[0]!r}; one of {sorted(ARTIFACTS)}, or v<N>/<one of them>"


@dataclass
class _Upload:
    path: Path
    handle: BinaryIO
    size: int
    touched: float
    client: str = ""

    @property
    def finished(self) -> bool:
        """Finishing closes the file: what was written is the package."""
        return self.handle.closed


def _name(location: str) -> str:
    """How refusals name an upload: its file name, not where the inbox is."""
    return repr(Path(location or "").name or location)


class Inbox:
    """``beginFileUpload`` / ``uploadChunk`` / ``finishFileUpload``, then ``claim`` at submit.

    Quotas keep a flood of uploads from filling the disk or locking ``storm jar`` out: each upload is at
    most ``max_upload_bytes``, all uploads together at most ``max_total_bytes``, a client host has at most
    ``max_per_client`` unfinished uploads, and an unfinished upload with no chunk for ``idle_upload_secs``
    is dropped as soon as someone else begins one (a finished, unclaimed one after ``session_expiry_secs``).
    A finished upload must be a zip (a topology package).

    Example::

        inbox = Inbox(Path("/tmp/inbox"), RealClock(), max_upload_bytes=2**20, session_expiry_secs=600,
                      file_expiry_secs=3600)
        location = inbox.begin_upload("10.0.0.7")
        inbox.upload_chunk(location, zip_bytes)
        inbox.finish_upload(location)
        package = inbox.claim(location)
    """

    def __init__(
        self,
        root: Path,
        clock: Clock,
        *,
        max_upload_bytes: int,
        session_expiry_secs: float,
        file_expiry_secs: float,
        max_total_bytes: int | None = None,
        idle_upload_secs: float | None = None,
        max_per_client: int = MAX_SESSIONS,
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self._max = max_upload_bytes
        self._max_total = max_total_bytes if max_total_bytes is not None else MAX_SESSIONS * max_upload_bytes
        self._session_expiry = session_expiry_secs
        self._idle_upload = idle_upload_secs if idle_upload_secs is not None else session_expiry_secs
        self._max_per_client = max_per_client
        self._file_expiry = file_expiry_secs
        self._uploads: dict[str, _Upload] = {}
        self._lock = threading.Lock()

    def begin_upload(self, client: str = "") -> str:
        """A location shaped like Storm's (``<inbox>/stormjar-<uuid>.jar``) but only valid through this table."""
        path = self.root / f"stormjar-{secrets.token_hex(16)}.jar"
        location = str(path)
        with self._lock:
            self._expire_sessions()
            if len(self._uploads) >= MAX_SESSIONS:
                raise UploadError(
                    f"too many uploads in progress ({MAX_SESSIONS}); retry in "
                    f"{self._idle_upload:g} s, when idle ones have expired (nimbus.upload.idle.secs)"
                )
            mine = sum(1 for u in self._uploads.values() if u.client == client and not u.finished)
            if client and mine >= self._max_per_client:
                raise UploadError(
                    f"{client} already has {mine} uploads in progress, the most one client may have "
                    "(nimbus.upload.max.per.client); finish them or let them expire"
                )
            # The file stays open across uploadChunk calls until finishFileUpload or expiry closes it.
            self._uploads[location] = _Upload(path, open(path, "wb"), 0, self._clock.monotonic(), client)  # noqa: SIM115
        return location

    def upload_chunk(self, location: str, chunk: bytes) -> None:
        with self._lock:
            upload = self._open(location)
            if upload.size + len(chunk) > self._max:
                self._drop(location)
                raise UploadError(
                    f"upload {_name(location)} exceeds {self._max} bytes (nimbus.max.upload.bytes); "
                    "the upload was discarded"
                )
            if sum(u.size for u in self._uploads.values()) + len(chunk) > self._max_total:
                self._drop(location)
                raise UploadError(
                    f"the uploads in progress on nimbus hold {self._max_total} bytes, all the inbox "
                    "may hold (nimbus.inbox.max.bytes); the upload was discarded, retry later"
                )
            upload.handle.write(chunk)
            upload.size += len(chunk)
            upload.touched = self._clock.monotonic()

    def finish_upload(self, location: str) -> None:
        with self._lock:
            upload = self._open(location)
            upload.handle.close()
            upload.touched = self._clock.monotonic()
            if not zipfile.is_zipfile(upload.path):
                self._drop(location)
                raise UploadError(
                    f"upload {_name(location)} is not a zip file; upload a topology package "
                    "(storm jar builds one from your sources)"
                )

    def add(self, package: Path) -> str:
        """A finished upload holding a copy of ``package`` (code nimbus already has, resubmitted by a restart)."""
        location = self.begin_upload()
        with self._lock:
            upload = self._open(location)
            upload.handle.close()
            shutil.copyfile(package, upload.path)
        return location

    def claim(self, location: str | None) -> Path | None:
        """The finished upload for a submit (None when nothing was uploaded); it can be claimed once."""
        if not location:
            return None
        with self._lock:
            upload = self._uploads.get(location)
            if upload is None or not upload.finished:
                raise UploadError(
                    f"no finished upload {_name(location)}: call beginFileUpload, uploadChunk "
                    "and finishFileUpload first (uploads expire after nimbus.file.copy.expiration.secs)"
                )
            del self._uploads[location]
            return upload.path

    def cleanup(self) -> None:
        """Drop idle sessions and delete inbox files nobody claimed in time."""
        with self._lock:
            self._expire_sessions()
            live = {u.path for u in self._uploads.values()}
        wall = self._clock.time()
        for path in self.root.glob("stormjar-*.jar"):
            try:
                if path not in live and wall - path.stat().st_mtime > self._file_expiry:
                    path.unlink()
            except FileNotFoundError:
                pass

    def _expire_sessions(self) -> None:
        """Drop unfinished uploads idle past ``idle_upload_secs`` and finished ones past ``session_expiry_secs``."""
        now = self._clock.monotonic()
        for location, upload in list(self._uploads.items()):
            if now - upload.touched > (self._session_expiry if upload.finished else self._idle_upload):
                self._drop(location)

    def _open(self, location: str) -> _Upload:
        upload = self._uploads.get(location)
        if upload is None:
            raise UploadError(f"unknown or expired upload location {_name(location)}; start again with beginFileUpload")
        if upload.finished:
            raise UploadError(f"upload {_name(location)} is already finished")
        return upload

    def _drop(self, location: str) -> None:
        upload = self._uploads.pop(location)
        upload.handle.close()
        upload.path.unlink(missing_ok=True)


#: ``beginCodeDownload`` artifacts → file in a version directory. A bare name is the current version's;
#: ``v<N>/<name>`` names version N, so a supervisor fetching a gray upgrade's code gets exactly that version.
#: Supervisors fetch :data:`CODE_FILES`; nimbuses copying code from each other also fetch the system topology.
ARTIFACTS = {**CODE_FILES, "system": "system.bin"}
_VERSIONED = re.compile(r"^v(\d{1,9})/(\w+)$")
CURRENT = "current"


def files_digest(directory: Path) -> str:
    """SHA-256 over a code version's files (:data:`ARTIFACTS`): equal digests, equal code, conf and topology."""
    sha = hashlib.sha256()
    for name in sorted(ARTIFACTS.values()):
        path = directory / name
        if path.exists():
            sha.update(f"{name}\0{path.stat().st_size}\0".encode())
            with open(path, "rb") as data:
                while block := data.read(1 << 20):
                    sha.update(block)
    return sha.hexdigest()


class CodeStore:
    """``<root>/<topology-id>/<version>/`` holds the code package, conf JSON and Thrift-binary topologies of
    one code version; ``<root>/<topology-id>/current`` is a symlink to the version workers run by default.

    A version is written once and never changed, so a supervisor can download it at any time and get
    the same bytes; a gray upgrade is a second version beside the first until one of them is dropped.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._digests: dict[tuple[str, int, int], str] = {}

    def put(
        self,
        topology_id: str,
        *,
        package: Path | None,
        conf: dict[str, Any],
        topology: Any,
        system: Any,
        version: int = 1,
        make_current: bool = True,
        replace: bool = False,
    ) -> None:
        """Write a whole version atomically (a temp dir renamed into place): readers never see half of one.

        A version is new unless ``replace``: a rebalance rewrites the current version's conf and topology,
        since its workers keep running and refresh in place.
        """

        def write(staging: Path) -> None:
            (staging / "conf.json").write_text(json.dumps(conf, sort_keys=True))
            (staging / "topology.bin").write_bytes(to_bytes(topology))
            (staging / "system.bin").write_bytes(to_bytes(system))
            if package is not None:
                shutil.copyfile(package, staging / "code.pkg")

        self.install(topology_id, version, write, make_current=make_current, replace=replace)

    def install(
        self,
        topology_id: str,
        version: int,
        write: Callable[[Path], None],
        *,
        make_current: bool = False,
        replace: bool = False,
    ) -> None:
        """``write(staging_dir)`` fills a version's files (:data:`ARTIFACTS`' names), then the version appears
        whole; a follower installs the versions it copies from another nimbus this way."""
        base = self._dir(topology_id)
        base.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=base))
        try:
            write(staging)
            with self._lock:
                target = base / str(version)
                if not target.exists():
                    staging.rename(target)
                elif not replace:
                    raise FileExistsError(f"{topology_id} already has code version {version}")
                else:
                    old = base / f".old-{secrets.token_hex(4)}"
                    target.rename(old)
                    staging.rename(target)
                    shutil.rmtree(old)
            if make_current:
                self.set_current(topology_id, version)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            if not any(p for p in base.iterdir() if not p.name.startswith(".")):
                shutil.rmtree(base, ignore_errors=True)
            raise

    def digest(self, topology_id: str, version: int) -> str:
        """:func:`files_digest` of a stored version, cached per version directory (a rewrite by rebalance is
        a new directory), so asking again is cheap."""
        directory = self._existing(topology_id) / str(version)
        stat = directory.stat()
        key = (str(directory), stat.st_ino, stat.st_ctime_ns)
        with self._lock:
            if key in self._digests:
                return self._digests[key]
        digest = files_digest(directory)
        with self._lock:
            self._digests[key] = digest
        return digest

    def set_current(self, topology_id: str, version: int) -> None:
        """Point ``current`` at ``version`` (a symlink swapped by rename: atomic)."""
        base = self._dir(topology_id)
        if not (base / str(version)).is_dir():
            raise MissingTopology(f"{topology_id}/{version}")
        link = base / f".current-{secrets.token_hex(4)}"
        link.symlink_to(str(version))
        link.replace(base / CURRENT)

    def current_version(self, topology_id: str) -> int:
        return int((self._existing(topology_id) / CURRENT).readlink().name)

    def versions(self, topology_id: str) -> list[int]:
        base = self._dir(topology_id)
        return sorted(int(p.name) for p in base.iterdir() if p.name.isdigit()) if base.is_dir() else []

    def drop(self, topology_id: str, version: int) -> None:
        """Forget a version that is not current (a rolled-back upgrade, or the old code after one)."""
        if version == self.current_version(topology_id):
            raise ValueError(f"{topology_id}: version {version} is current; point current elsewhere first")
        shutil.rmtree(self._dir(topology_id) / str(version), ignore_errors=True)

    def has(self, topology_id: str) -> bool:
        return _TOPOLOGY_ID.match(topology_id) is not None and (self._dir(topology_id) / CURRENT).is_dir()

    def ids(self) -> Iterator[str]:
        for path in sorted(self.root.iterdir()):
            if _TOPOLOGY_ID.match(path.name):
                yield path.name

    def remove(self, topology_id: str) -> None:
        shutil.rmtree(self._dir(topology_id), ignore_errors=True)

    def conf(self, topology_id: str, version: int | None = None) -> dict[str, Any]:
        return json.loads(self._file(topology_id, version, "conf.json").read_text())

    def topology(self, topology_id: str, version: int | None = None) -> Any:
        return from_bytes(storm.StormTopology, self._file(topology_id, version, "topology.bin").read_bytes())

    def system_topology(self, topology_id: str, version: int | None = None) -> Any:
        return from_bytes(storm.StormTopology, self._file(topology_id, version, "system.bin").read_bytes())

    def package(self, topology_id: str, version: int | None = None) -> Path | None:
        path = self._version_dir(topology_id, version) / "code.pkg"
        return path if path.exists() else None

    def artifact_path(self, topology_id: str, artifact: str) -> Path:
        version, name = None, artifact
        if match := _VERSIONED.match(artifact or ""):
            version, name = int(match[1]), match[2]
        if name not in ARTIFACTS:
            raise UnknownArtifact(artifact)
        return self._file(topology_id, version, ARTIFACTS[name])

    def _dir(self, topology_id: str) -> Path:
        if not _TOPOLOGY_ID.match(topology_id or ""):
            raise MissingTopology(topology_id)
        return self.root / topology_id

    def _existing(self, topology_id: str) -> Path:
        base = self._dir(topology_id)
        if not (base / CURRENT).is_dir():
            raise MissingTopology(topology_id)
        return base

    def _version_dir(self, topology_id: str, version: int | None) -> Path:
        return self._existing(topology_id) / (CURRENT if version is None else str(version))

    def _file(self, topology_id: str, version: int | None, name: str) -> Path:
        path = self._version_dir(topology_id, version) / name
        if not path.exists():
            raise MissingTopology(f"{topology_id}/{CURRENT if version is None else version}/{name}")
        return path


@dataclass
class _Download:
    handle: BinaryIO
    touched: float


class Downloads:
    """``beginFileDownload``/``beginCodeDownload`` → session id; ``downloadChunk`` until ``b""``."""

    def __init__(self, clock: Clock, *, chunk_bytes: int, session_expiry_secs: float) -> None:
        self._clock = clock
        self._chunk = chunk_bytes
        self._expiry = session_expiry_secs
        self._sessions: dict[str, _Download] = {}
        self._lock = threading.Lock()

    def begin(self, path: Path) -> str:
        session = secrets.token_urlsafe(24)
        with self._lock:
            if len(self._sessions) >= MAX_SESSIONS:
                raise DownloadError(f"too many downloads in progress ({MAX_SESSIONS}); retry later")
            # Open until the last chunk or expiry: the session reads the version it began with, even if the
            # topology's code is replaced meanwhile.
            self._sessions[session] = _Download(open(path, "rb"), self._clock.monotonic())  # noqa: SIM115
        return session

    def chunk(self, session: str) -> bytes:
        with self._lock:
            download = self._sessions.get(session)
            if download is None:
                raise DownloadError(f"unknown or expired download session {session!r}")
            data = download.handle.read(self._chunk)
            download.touched = self._clock.monotonic()
            if not data:
                download.handle.close()
                del self._sessions[session]
            return data

    def cleanup(self) -> None:
        now = self._clock.monotonic()
        with self._lock:
            for session, download in list(self._sessions.items()):
                if now - download.touched > self._expiry:
                    download.handle.close()
                    del self._sessions[session]
