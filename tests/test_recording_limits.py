"""What call recordings may cost against hostile clients (issue 42, item 8), on a real
server with ``PARLEY_RECORDING``: a call that never speaks has no recording (no file, no
worker thread) until the first audio of either side; the folder is kept under
``PARLEY_RECORDING_MAX_BYTES``, oldest first; and a live recording is served from the
disk as far as it was written, never read whole into memory."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from testkit.server_process import ServerProcess
from testkit.socket_callers import PcmCaller

pytestmark = pytest.mark.e2e

MB = 1_000_000
CAP = 2 * MB
OLD_FILES = 12  # 250 KB each, all older than a day: 3 MB, over the cap


def proc_status(server: ServerProcess, field: str) -> int:
    """A figure of the server's ``/proc/<pid>/status`` (kB figures in bytes)."""
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            value = int(line.split()[1])
            return value * 1024 if line.endswith("kB") else value
    raise KeyError(field)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recordings folder, holding old recordings before the server starts."""
    path = tmp_path_factory.mktemp("recordings")
    now = time.time()
    for n in range(OLD_FILES):
        old = path / f"old-{n:02d}.ogg"
        old.write_bytes(b"OggS" + bytes(250_000 - 4))
        written = now - 86400 * (2 + OLD_FILES - n)  # old-00 the oldest
        os.utime(old, (written, written))
    return path


@pytest.fixture(scope="module")
def served(start_server: Callable[..., ServerProcess], folder: Path) -> ServerProcess:
    return start_server(recording="true", recording_dir=str(folder), recording_max_bytes=str(CAP))


def ws_url(server: ServerProcess) -> str:
    return server.url.replace("http://", "ws://") + "/ws"


@contextlib.asynccontextmanager
async def silent_calls(server: ServerProcess, count: int) -> AsyncIterator[list[str]]:
    """``count`` calls over ``/ws`` that connect and send nothing; their pc_ids."""
    async with contextlib.AsyncExitStack() as stack, httpx.AsyncClient(base_url=server.url) as http:
        before = {s["pc_id"] for s in (await http.get("/api/sessions")).json()["sessions"]}
        callers: list[PcmCaller] = []
        for _ in range(count):
            caller = PcmCaller(ws_url(server))
            await stack.enter_async_context(caller)
            caller.muted = True  # before its microphone's first frame
            callers.append(caller)
        deadline = time.monotonic() + 10
        while True:
            sessions = (await http.get("/api/sessions")).json()["sessions"]
            ids = [s["pc_id"] for s in sessions if s["pc_id"] not in before]
            if len(ids) == count or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert len(ids) == count
        yield ids


async def until(check: Callable[[], bool], within: float) -> bool:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


@pytest.mark.timeout(60)
async def test_a_call_that_never_speaks_costs_no_file_and_no_thread(
    served: ServerProcess, folder: Path
) -> None:
    async with silent_calls(served, 1):  # what a first call starts, started
        await asyncio.sleep(1.0)
    threads = proc_status(served, "Threads")
    count = 12
    async with silent_calls(served, count) as ids:
        await asyncio.sleep(1.5)  # a recording's worker opens its file at once
        made = [pc_id for pc_id in ids if (folder / f"{pc_id}.ogg").exists()]
        more_threads = proc_status(served, "Threads") - threads
    assert made == [], f"{len(made)} of {count} silent calls have a recording file"
    assert more_threads < count / 2, f"{more_threads} more threads for {count} silent calls"


@pytest.mark.timeout(60)
async def test_the_first_audio_of_the_call_starts_its_recording(
    served: ServerProcess, folder: Path
) -> None:
    async with silent_calls(served, 1) as (pc_id,):
        path = folder / f"{pc_id}.ogg"
        await asyncio.sleep(1.0)
        assert not path.exists()
        async with PcmCaller(ws_url(served)):  # speaking (silence, as a microphone sends it)
            assert await until(lambda: bool(set(folder.glob("*.ogg")) - _old(folder) - {path}), 10)


def _old(folder: Path) -> set[Path]:
    return {folder / f"old-{n:02d}.ogg" for n in range(OLD_FILES)}


@pytest.mark.timeout(60)
def test_the_folder_is_kept_under_its_cap_oldest_first(served: ServerProcess, folder: Path) -> None:
    left = sorted(p.name for p in folder.glob("old-*.ogg"))
    # At start-up: the oldest removed, the newest kept, the folder under the cap.
    assert left and "old-00.ogg" not in left and f"old-{OLD_FILES - 1:02d}.ogg" in left
    assert left == [f"old-{n:02d}.ogg" for n in range(OLD_FILES - len(left), OLD_FILES)]
    assert sum(p.stat().st_size for p in folder.glob("old-*.ogg")) <= CAP  # and calls' since
    health = httpx.get(f"{served.url}/health", timeout=5).json()
    figures = health["recordings"]
    assert figures["max_bytes"] == CAP
    assert figures["removed_over_cap"] == OLD_FILES - len(left)
    assert figures["bytes"] <= CAP
    assert "PARLEY_RECORDING_MAX_BYTES" in served.log()


@pytest.mark.timeout(60)
async def test_a_live_recording_is_streamed_as_far_as_it_is_written(
    served: ServerProcess, folder: Path
) -> None:
    size = 200 * MB  # two days of call: a hole in the file, nothing on the disk
    async with silent_calls(served, 1) as (pc_id,), httpx.AsyncClient(base_url=served.url) as http:
        path = folder / f"{pc_id}.ogg"
        with path.open("wb") as file:
            file.write(b"OggS" + bytes(60))
            file.truncate(size)
        peak = proc_status(served, "VmHWM")
        got = 0
        url = f"/api/sessions/{pc_id}/recording"
        async with http.stream("GET", url, timeout=60) as answer:
            assert answer.status_code == 200
            assert answer.headers["content-type"] == "audio/ogg"
            assert int(answer.headers["content-length"]) == size
            with path.open("ab") as file:  # the call goes on: written after the GET began
                file.write(bytes(MB))
            async for chunk in answer.aiter_raw():
                got += len(chunk)
        grew = proc_status(served, "VmHWM") - peak
        path.unlink()  # before the cap's next sweep weighs it
    assert got == size, "what was written when it was asked for"
    assert grew < 64 * MB, f"the server's peak memory grew {grew / MB:.0f} MB"
