"""Replica ids: every id a replica makes names it, so a load balancer can route by id."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import ValidationError

from server.session.registry import new_id
from server.settings import Settings
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess


@pytest.mark.e2e
async def test_ids_carry_the_replica(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(replica_id="r7")
    client = RTCTestClient(server.url)
    try:
        started = (await client.http.post("/start", json={})).raise_for_status().json()
        assert started["sessionId"].startswith("r7.")
        await client.connect(session_id=started["sessionId"])
        assert client.pc_id is not None and client.pc_id.startswith("r7.")
        # The rest of the id is as random as an unprefixed one.
        assert len(client.pc_id) > len("r7.") + 16 and "." not in client.pc_id[3:]
        info = (await client.http.get(f"/api/sessions/{client.pc_id}")).json()
        assert info["session_id"] == started["sessionId"]
    finally:
        await client.close()


def test_no_prefix_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARLEY_REPLICA_ID", raising=False)
    assert Settings().replica_id == ""
    ids = {new_id() for _ in range(100)}
    assert len(ids) == 100 and not any("." in i for i in ids)
    assert all(len(i) >= 16 for i in ids)


@pytest.mark.parametrize("bad", ["r.1", "a/b", "x" * 33, "r 1"])
def test_bad_replica_ids_are_refused(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    """Ids must stay one URL path segment with an unambiguous separator."""
    monkeypatch.setenv("PARLEY_REPLICA_ID", bad)
    with pytest.raises(ValidationError, match="replica_id"):
        Settings()
