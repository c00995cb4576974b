"""Nimbus's code on disk: bounded, expiring uploads; atomic per-topology store; chunked downloads."""

from __future__ import annotations

import io
import shutil
import threading
import zipfile
from pathlib import Path

import pytest

from nimbus.codestore import CodeStore, DownloadError, Downloads, Inbox, MissingTopology, UnknownArtifact, UploadError
from squall.core.clock import SimulatedClock
from squall.core.thrift import storm

TID = "wc-1-1700000000"


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock()


@pytest.fixture
def inbox(tmp_path: Path, clock: SimulatedClock) -> Inbox:
    return Inbox(tmp_path / "inbox", clock, max_upload_bytes=1000, session_expiry_secs=60, file_expiry_secs=3600)


def package(content: bytes) -> bytes:
    """A topology package (uploads must be zips) holding ``content``; the same bytes for the same content."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(zipfile.ZipInfo("topology.py", date_time=(2020, 1, 1, 0, 0, 0)), content)
    return buffer.getvalue()


def upload(inbox: Inbox, *chunks: bytes) -> str:
    location = inbox.begin_upload()
    for chunk in chunks:
        inbox.upload_chunk(location, chunk)
    inbox.finish_upload(location)
    return location


def topology() -> storm.StormTopology:
    spout = storm.SpoutSpec(spout_object=storm.ComponentObject(
        python_object=storm.PythonComponent(module_name="wc.spouts", class_name="Sentences")),
        common=storm.ComponentCommon(inputs={}, streams={"default": storm.StreamInfo(["sentence"], False)},
                                     parallelism_hint=2))
    return storm.StormTopology(spouts={"sentences": spout}, bolts={}, state_spouts={})


def test_chunks_arrive_whole_and_can_be_claimed_once(inbox: Inbox) -> None:
    data = package(b"abcdef")
    location = upload(inbox, data[:7], data[7:])
    path = inbox.claim(location)
    assert path is not None and path.read_bytes() == data
    with pytest.raises(UploadError, match="no finished upload"):
        inbox.claim(location)
    assert inbox.claim("") is None


@pytest.mark.parametrize("location", ["../../etc/passwd", "/tmp/stormjar-0000.jar", "", "x"])
def test_locations_not_handed_out_are_refused(inbox: Inbox, location: str) -> None:
    with pytest.raises(UploadError, match="unknown or expired upload location"):
        inbox.upload_chunk(location, b"x")


def test_out_of_order_calls_are_refused(inbox: Inbox) -> None:
    location = inbox.begin_upload()
    with pytest.raises(UploadError, match="no finished upload"):
        inbox.claim(location)
    inbox.upload_chunk(location, package(b""))
    inbox.finish_upload(location)
    with pytest.raises(UploadError, match="already finished"):
        inbox.upload_chunk(location, b"late")
    with pytest.raises(UploadError, match="already finished"):
        inbox.finish_upload(location)


def test_size_bound_discards_the_upload(inbox: Inbox) -> None:
    location = inbox.begin_upload()
    inbox.upload_chunk(location, b"x" * 600)
    with pytest.raises(UploadError, match=r"exceeds 1000 bytes \(nimbus.max.upload.bytes\)"):
        inbox.upload_chunk(location, b"x" * 600)
    with pytest.raises(UploadError, match="unknown or expired"):
        inbox.upload_chunk(location, b"x")
    assert list(inbox.root.iterdir()) == []


def test_idle_sessions_expire_and_active_ones_do_not(inbox: Inbox, clock: SimulatedClock) -> None:
    idle, active = inbox.begin_upload(), inbox.begin_upload()
    for _ in range(3):
        clock.advance(40)
        inbox.upload_chunk(active, b"x")
        inbox.cleanup()
    with pytest.raises(UploadError, match="unknown or expired"):
        inbox.upload_chunk(idle, b"x")
    inbox.upload_chunk(active, b"x")


def test_unclaimed_files_are_deleted_after_their_expiry(tmp_path: Path, clock: SimulatedClock) -> None:
    inbox = Inbox(tmp_path / "inbox", clock, max_upload_bytes=1000, session_expiry_secs=60, file_expiry_secs=0)
    upload(inbox, package(b"abc"))
    clock.advance(61)
    inbox.cleanup()
    assert list(inbox.root.iterdir()) == []


def test_concurrent_uploads_stay_separate(inbox: Inbox) -> None:
    results: dict[int, bytes] = {}

    def one(i: int) -> None:
        path = inbox.claim(upload(inbox, package(bytes([i]) * 50)))
        results[i] = path.read_bytes()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == {i: package(bytes([i]) * 50) for i in range(8)}


def test_store_round_trips_conf_topologies_and_package(tmp_path: Path, inbox: Inbox) -> None:
    store = CodeStore(tmp_path / "store")
    stored = inbox.claim(upload(inbox, package(b"code")))
    store.put(TID, package=stored, conf={"topology.workers": 2}, topology=topology(), system=topology())
    assert store.has(TID) and list(store.ids()) == [TID]
    assert store.conf(TID) == {"topology.workers": 2}
    assert store.topology(TID) == topology() and store.system_topology(TID) == topology()
    assert store.artifact_path(TID, "code").read_bytes() == package(b"code")
    store.remove(TID)
    assert not store.has(TID) and list(store.ids()) == []


def test_failed_put_leaves_nothing_visible(tmp_path: Path) -> None:
    store = CodeStore(tmp_path / "store")
    with pytest.raises(TypeError):
        store.put(TID, package=None, conf={"bad": object()}, topology=topology(), system=topology())
    assert not store.has(TID)
    assert list((tmp_path / "store").iterdir()) == []


def test_versions_live_side_by_side_and_current_moves(tmp_path: Path) -> None:
    store = CodeStore(tmp_path / "store")
    store.put(TID, package=None, conf={"version": 1}, topology=topology(), system=topology())
    store.put(TID, package=None, conf={"version": 2}, topology=topology(), system=topology(), version=2,
              make_current=False)
    assert store.conf(TID) == {"version": 1} and store.current_version(TID) == 1
    assert store.versions(TID) == [1, 2]
    assert store.artifact_path(TID, "v2/conf").read_text() == '{"version": 2}'
    assert store.artifact_path(TID, "v1/conf").read_text() == '{"version": 1}'
    with pytest.raises(FileExistsError, match="already has code version 2"):
        store.put(TID, package=None, conf={}, topology=topology(), system=topology(), version=2)
    store.set_current(TID, 2)
    assert store.conf(TID) == {"version": 2} and store.artifact_path(TID, "conf").read_text() == '{"version": 2}'
    with pytest.raises(ValueError, match="version 2 is current"):
        store.drop(TID, 2)
    store.drop(TID, 1)
    assert store.versions(TID) == [2]
    with pytest.raises(MissingTopology):
        store.artifact_path(TID, "v1/conf")
    with pytest.raises(MissingTopology):
        store.set_current(TID, 1)


def test_artifacts_and_ids_are_checked(tmp_path: Path) -> None:
    store = CodeStore(tmp_path / "store")
    store.put(TID, package=None, conf={}, topology=topology(), system=topology())
    assert store.artifact_path(TID, "conf").name == "conf.json"
    with pytest.raises(UnknownArtifact, match="unknown artifact '../conf'"):
        store.artifact_path(TID, "../conf")
    with pytest.raises(MissingTopology, match="wc-1-1700000000/current/code.pkg"):
        store.artifact_path(TID, "code")  # nothing uploaded
    assert store.artifact_path(TID, "v1/system").name == "system.bin"  # nimbuses copy it from each other
    for bad_artifact in ("v1/../conf", "v/conf", "v1/stormjar", "current/conf"):
        with pytest.raises(UnknownArtifact):
            store.artifact_path(TID, bad_artifact)
    for bad in ("../wc-1-1700000000", "wc", "wc-1-1700000000/..", ""):
        with pytest.raises(MissingTopology):
            store.conf(bad)


def test_a_digest_names_a_version_s_bytes_and_a_failed_install_leaves_nothing(tmp_path: Path) -> None:
    store = CodeStore(tmp_path / "store")
    store.put(TID, package=None, conf={"a": 1}, topology=topology(), system=topology())
    first = store.digest(TID, 1)
    other = CodeStore(tmp_path / "other")
    other.install(TID, 1, lambda staging: shutil.copytree(store.root / TID / "1", staging, dirs_exist_ok=True),
                  make_current=True)
    assert other.digest(TID, 1) == first and other.conf(TID) == {"a": 1}
    store.put(TID, package=None, conf={"a": 2}, topology=topology(), system=topology(), replace=True)
    assert store.digest(TID, 1) != first  # a rebalance's rewrite in place is other code to copy

    def fails(staging: Path) -> None:
        (staging / "conf.json").write_text("{}")
        raise OSError("the source went away")

    with pytest.raises(OSError):
        other.install("wc-2-1700000000", 1, fails)
    assert list(other.ids()) == [TID] and other.digest(TID, 1) == first


def test_downloads_come_in_chunks_then_end(tmp_path: Path, clock: SimulatedClock) -> None:
    path = tmp_path / "blob"
    path.write_bytes(b"0123456789")
    downloads = Downloads(clock, chunk_bytes=4, session_expiry_secs=60)
    session = downloads.begin(path)
    assert [downloads.chunk(session) for _ in range(4)] == [b"0123", b"4567", b"89", b""]
    with pytest.raises(DownloadError):
        downloads.chunk(session)
    idle = downloads.begin(path)
    clock.advance(61)
    downloads.cleanup()
    with pytest.raises(DownloadError, match="unknown or expired"):
        downloads.chunk(idle)


def test_open_sessions_are_bounded(inbox: Inbox, tmp_path: Path, clock: SimulatedClock) -> None:
    from nimbus.codestore import MAX_SESSIONS

    for _ in range(MAX_SESSIONS):
        inbox.begin_upload()
    with pytest.raises(UploadError, match="too many uploads in progress"):
        inbox.begin_upload()
    clock.advance(61)
    inbox.cleanup()
    inbox.begin_upload()  # idle ones expired, room again


def test_uploads_together_are_bounded_by_the_inbox_quota(tmp_path: Path, clock: SimulatedClock) -> None:
    inbox = Inbox(tmp_path / "inbox", clock, max_upload_bytes=1000, session_expiry_secs=60, file_expiry_secs=3600,
                  max_total_bytes=1500)
    first, second = inbox.begin_upload(), inbox.begin_upload()
    inbox.upload_chunk(first, b"x" * 900)
    with pytest.raises(UploadError, match=r"nimbus.inbox.max.bytes") as refused:
        inbox.upload_chunk(second, b"x" * 900)
    assert str(inbox.root) not in str(refused.value)
    inbox.upload_chunk(first, b"x" * 100)  # the upload within the quota goes on


def test_idle_unfinished_uploads_expire_when_another_begins(tmp_path: Path, clock: SimulatedClock) -> None:
    inbox = Inbox(tmp_path / "inbox", clock, max_upload_bytes=1000, session_expiry_secs=600, file_expiry_secs=3600,
                  idle_upload_secs=30, max_per_client=2)
    idle = [inbox.begin_upload("10.0.0.9") for _ in range(2)]
    with pytest.raises(UploadError, match="nimbus.upload.max.per.client"):
        inbox.begin_upload("10.0.0.9")
    inbox.begin_upload("10.0.0.8")  # another host is not limited by this one
    clock.advance(31)
    inbox.begin_upload("10.0.0.9")
    with pytest.raises(UploadError, match="unknown or expired"):
        inbox.upload_chunk(idle[0], b"x")


def test_a_finished_upload_must_be_a_zip(inbox: Inbox) -> None:
    location = inbox.begin_upload()
    inbox.upload_chunk(location, b"not a zip")
    with pytest.raises(UploadError, match="is not a zip file"):
        inbox.finish_upload(location)
    assert list(inbox.root.iterdir()) == []
