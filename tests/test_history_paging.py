"""Paging through history never skips nor repeats a session, even when many sessions
started in the same microsecond across a page boundary (a keyset on (time, id))."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from server.api.app import create_app
from server.settings import Settings
from server.storage.memory import MemoryTranscriptStore
from server.storage.sqlite import SQLiteTranscriptStore
from server.storage.store import TranscriptStore

T0 = 1_700_000_000.0
# Three sessions before, seven at the same instant, two after: pages of 3 cut the tie.
STARTS = {"a1": T0 - 2, "a2": T0 - 1, "a3": T0 - 0.5}
STARTS |= {f"s{n}": T0 for n in range(7)}
STARTS |= {"z1": T0 + 1, "z2": T0 + 2}


@pytest.fixture(params=["sqlite", "none"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TranscriptStore]:
    opened: TranscriptStore
    if request.param == "sqlite":
        opened = SQLiteTranscriptStore(tmp_path)
    else:
        opened = MemoryTranscriptStore()
    await opened.start()
    for session_id, at in STARTS.items():
        opened.open_session(session_id, None, {}, at)
    yield opened
    await opened.close()


def newest_first() -> list[str]:
    return sorted(STARTS, key=lambda s: (STARTS[s], s), reverse=True)


@pytest.mark.parametrize("limit", [1, 2, 3, 4])
async def test_pages_cut_through_a_tie_without_skipping(store: TranscriptStore, limit: int) -> None:
    seen: list[str] = []
    page = await store.list_sessions(limit=limit)
    while page:
        seen += [s.id for s in page]
        last = page[-1]
        page = await store.list_sessions(
            limit=limit, before=last.started_at.timestamp(), before_id=last.id
        )
    assert seen == newest_first()


async def test_before_alone_still_means_strictly_earlier(store: TranscriptStore) -> None:
    assert [s.id for s in await store.list_sessions(before=T0)] == ["a3", "a2", "a1"]


def test_http_history_hands_out_a_cursor_that_pages_through_a_tie() -> None:
    settings = Settings(
        stt="openai", llm="openai", tts="openai", openai_base_url="http://127.0.0.1:9",
        preload_models=False, greeting="", storage="none",
    )  # fmt: skip
    app = create_app(settings)
    with TestClient(app) as http:
        for session_id, at in STARTS.items():
            app.state.store.open_session(session_id, None, {}, at)
        seen: list[str] = []
        params: dict[str, object] = {"limit": 3}
        while True:
            response = http.get("/api/history", params=params)
            assert response.status_code == 200, response.text
            body = response.json()
            seen += [s["id"] for s in body["sessions"]]
            if body["next_before"] is None:
                assert body["next_before_id"] is None
                break
            params = {
                "limit": 3,
                "before": body["next_before"],
                "before_id": body["next_before_id"],
            }
        assert seen == newest_first()
        lone_id = http.get("/api/history", params={"before_id": "s3"})
        assert lone_id.status_code == 422, "a before_id needs its before"
        assert "before" in lone_id.json()["error"]
