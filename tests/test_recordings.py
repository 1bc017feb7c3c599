"""The folder of call recordings: a file per session named by an id that cannot leave the
folder, retention deleting recordings as old as the transcripts it deletes, the folder's
cap (``PARLEY_RECORDING_MAX_BYTES``: the oldest removed first) and a recording read in
chunks as far as it was written."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pydantic
import pytest

from server.settings import Settings
from server.storage.memory import MemoryTranscriptStore
from server.storage.recordings import CHUNK_BYTES, RecordingDirectory, read_chunks
from server.storage.retention import purge_expired


def test_a_recording_is_named_by_its_session_and_nothing_else(tmp_path: Path) -> None:
    folder = RecordingDirectory(tmp_path)
    assert folder.path("r1.AbC-d_9") == tmp_path / "r1.AbC-d_9.ogg"
    for bad in ("../etc/passwd", "a/b", "", ".hidden", "x" * 300, "a\x00b", "a b"):
        assert folder.path(bad) is None, bad
        assert not folder.has(bad)
    assert not folder.has("nobody")
    (tmp_path / "someone.ogg").write_bytes(b"OggS")
    assert folder.has("someone")


def test_the_folder_is_the_setting_or_the_data_dirs(tmp_path: Path) -> None:
    default = RecordingDirectory.of(Settings(data_dir=tmp_path))
    assert default.folder == tmp_path / "recordings"
    chosen = RecordingDirectory.of(Settings(data_dir=tmp_path, recording_dir=tmp_path / "v"))
    assert chosen.folder == tmp_path / "v"


async def test_retention_deletes_recordings_past_it_and_keeps_the_rest(tmp_path: Path) -> None:
    folder = RecordingDirectory(tmp_path / "recordings")
    folder.folder.mkdir()
    old, new = folder.path("old"), folder.path("new")
    assert old is not None and new is not None
    old.write_bytes(b"OggS")
    new.write_bytes(b"OggS")
    ten_days_ago = time.time() - 10 * 86400
    os.utime(old, (ten_days_ago, ten_days_ago))
    store = MemoryTranscriptStore()
    await store.start()
    await purge_expired(store, 0, folder)  # 0: keep for ever
    assert old.exists()
    await purge_expired(store, 2, folder)
    assert not old.exists() and new.exists()
    await purge_expired(store, 2, RecordingDirectory(tmp_path / "none-yet"))  # no folder


def test_recording_needs_a_transcript_store() -> None:
    with pytest.raises(pydantic.ValidationError, match="recording needs a transcript store"):
        Settings(recording=True, storage="none")


def recordings_of(folder: Path, ages: dict[str, float], size: int = 1000) -> None:
    """Files of ``size`` bytes named by ``ages``, last written that many seconds ago."""
    folder.mkdir(exist_ok=True)
    now = time.time()
    for name, age in ages.items():
        path = folder / f"{name}.ogg"
        path.write_bytes(bytes(size))
        os.utime(path, (now - age, now - age))


def test_the_cap_removes_the_oldest_recordings_first(tmp_path: Path) -> None:
    recordings_of(tmp_path, {"a": 5000, "b": 4000, "c": 3000, "d": 2000, "e": 1000})
    (tmp_path / "notes.txt").write_bytes(bytes(10_000))  # not a recording: not counted
    folder = RecordingDirectory(tmp_path, max_bytes=2500)
    sweep = folder.cap()
    assert sorted(p.stem for p in tmp_path.glob("*.ogg")) == ["d", "e"]
    assert (sweep.removed, sweep.removed_bytes, sweep.files, sweep.bytes) == (3, 3000, 2, 2000)
    assert folder.cap().removed == 0  # under the cap: nothing more
    status = folder.status()
    assert status == {
        "max_bytes": 2500, "files": 2, "bytes": 2000,
        "removed_over_cap": 3, "removed_over_cap_bytes": 3000,
    }  # fmt: skip
    assert RecordingDirectory(tmp_path / "none-yet", max_bytes=1).cap().files == 0


def test_recordings_being_written_count_but_are_never_removed(tmp_path: Path) -> None:
    recordings_of(tmp_path, {"old": 5000, "live-1": 1, "live-2": 2})
    sweep = RecordingDirectory(tmp_path, max_bytes=1500).cap()
    assert sorted(p.stem for p in tmp_path.glob("*.ogg")) == ["live-1", "live-2"]
    assert (sweep.removed, sweep.bytes) == (1, 2000)  # still over: live calls' files


def test_no_cap_removes_nothing(tmp_path: Path) -> None:
    recordings_of(tmp_path, {"a": 5000, "b": 4000})
    assert RecordingDirectory(tmp_path, max_bytes=0).cap().removed == 0
    assert len(list(tmp_path.glob("*.ogg"))) == 2


def test_the_cap_is_a_setting_with_a_default(tmp_path: Path) -> None:
    assert RecordingDirectory.of(Settings(data_dir=tmp_path)).max_bytes == 5_000_000_000
    chosen = Settings(data_dir=tmp_path, recording_max_bytes=10**6)
    assert RecordingDirectory.of(chosen).max_bytes == 10**6


def test_a_recording_is_read_in_chunks_as_far_as_it_was_written(tmp_path: Path) -> None:
    folder = RecordingDirectory(tmp_path)
    assert folder.open_written("nobody") is None and folder.open_written("../x") is None
    path = tmp_path / "call.ogg"
    path.write_bytes(b"x" * (2 * CHUNK_BYTES + 10))
    written = folder.open_written("call")
    assert written is not None
    file, size = written
    assert size == 2 * CHUNK_BYTES + 10
    with path.open("ab") as more:  # the call goes on
        more.write(b"y" * 100)
    chunks = list(read_chunks(file, size))
    assert [len(c) for c in chunks] == [CHUNK_BYTES, CHUNK_BYTES, 10]
    assert b"y" not in b"".join(chunks) and file.closed
