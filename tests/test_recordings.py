"""The folder of call recordings: a file per session named by an id that cannot leave the
folder, and retention deleting recordings as old as the transcripts it deletes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pydantic
import pytest

from server.settings import Settings
from server.storage.memory import MemoryTranscriptStore
from server.storage.recordings import RecordingDirectory
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
