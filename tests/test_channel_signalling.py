"""Client input validated before anything keeps it: data-channel ``signalling`` messages,
JSON the data channel and the offer accept, and the record of rejected messages.

Over a real server and real WebRTC clients. Whatever one client sends, the others'
answers and ``GET /api/sessions`` stay intact.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from server.media.channel_signalling import MAX_RECEIVERS
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    # A generous message rate: these tests send many bad messages on purpose.
    return start_server(liveness_timeout="3", message_rate="500", message_burst="500")


def signalling(message: Any) -> str:
    return json.dumps({"type": "signalling", "message": message})


def errors(client: RTCTestClient) -> list[str]:
    return [m["data"]["error"] for m in client.messages if m.get("type") == "error"]


async def list_sessions(server: ServerProcess) -> list[dict[str, Any]]:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{server.url}/api/sessions")
    assert response.status_code == 200, response.text
    return response.json()["sessions"]


async def track_status(server: ServerProcess, pc_id: str | None) -> dict[str, Any]:
    sessions = await list_sessions(server)
    return next(s for s in sessions if s["pc_id"] == pc_id)["track_status"]


@pytest.mark.parametrize(
    "message",
    [
        {"type": "trackStatus", "receiver_index": 0, "enabled": "yes"},
        {"type": "trackStatus", "receiver_index": 0, "enabled": 1},
        {"type": "trackStatus", "receiver_index": 0, "enabled": {"deep": [1, 2]}},
        {"type": "trackStatus", "receiver_index": 0},
        {"type": "trackStatus", "receiver_index": "0", "enabled": True},
        {"type": "trackStatus", "receiver_index": -1, "enabled": True},
        {"type": "trackStatus", "receiver_index": 10**12, "enabled": True},
        {"type": "makeCoffee"},
        "trackStatus",
        None,
    ],
)
async def test_an_invalid_signalling_message_gets_an_rtvi_error(
    server: ServerProcess, pair: tuple[RTCTestClient, RTCTestClient], message: Any
) -> None:
    victim, bystander = pair
    victim.send_raw(signalling(message))
    error = await victim.wait_for(lambda m: m.get("type") == "error")
    assert error["data"]["error"].startswith("invalid signalling message"), error
    assert error["data"]["fatal"] is False
    assert await track_status(server, victim.pc_id) == {}, "nothing kept"
    assert len(await list_sessions(server)) >= 2, "the listing answers for everyone"
    assert (await victim.request("echo", 1))["data"]["d"] == 1
    assert errors(bystander) == []


async def test_track_status_keeps_one_entry_per_possible_receiver(
    server: ServerProcess, pair: tuple[RTCTestClient, RTCTestClient]
) -> None:
    victim, _ = pair
    for index in range(200):
        victim.send_raw(
            signalling({"type": "trackStatus", "receiver_index": index, "enabled": False})
        )
    await victim.request("echo")  # in order: every trackStatus before it has been served
    kept = await track_status(server, victim.pc_id)
    assert kept == {str(i): False for i in range(MAX_RECEIVERS)}
    assert len(errors(victim)) == 200 - MAX_RECEIVERS


async def test_nan_is_not_json(pair: tuple[RTCTestClient, RTCTestClient]) -> None:
    """Python's parser takes ``NaN``; echoed back, a browser's ``JSON.parse`` fails."""
    victim, _ = pair
    victim.send_raw('{"label": "rtvi-ai", "type": "client-message", "id": "n1",'
                    ' "data": {"t": "echo", "d": NaN}}')  # fmt: skip
    error = await victim.wait_for(lambda m: m.get("type") == "error")
    assert error["data"]["error"] == "malformed JSON"
    assert not any("NaN" in text for text in victim.texts)


async def test_app_data_nested_too_deep_is_refused(server: ServerProcess) -> None:
    """Kept, app data nested 300 deep would make ``GET /api/sessions`` fail for everyone."""
    deep = "[" * 300 + "]" * 300
    offerer = RTCTestClient(server.url)
    try:
        await offerer.pc.setLocalDescription(await offerer.pc.createOffer())
        offer = json.dumps({"sdp": offerer.pc.localDescription.sdp, "requestData": 1})
        for body in (
            offer.replace('"requestData": 1', f'"requestData": {deep}'),
            offer.replace('"requestData": 1', f'"requestData": {{"a": {deep}}}'),
        ):
            response = await offerer.http.post(
                "/api/offer", content=body, headers={"content-type": "application/json"}
            )
            assert response.status_code == 422, response.text[:300]
            assert "requestData" in response.text
        for body in (f'{{"requestData": {deep}}}', f'{{"app": {deep}}}'):
            started = await offerer.http.post(
                "/start", content=body, headers={"content-type": "application/json"}
            )
            assert started.status_code == 422, started.text[:300]
    finally:
        await offerer.close()
    await list_sessions(server)


async def test_rejected_messages_are_recorded_as_counts(server: ServerProcess) -> None:
    async with RTCTestClient(server.url) as client:
        for _ in range(30):
            client.send_raw("{not json")
        client.send_raw(json.dumps({"label": "rtvi-ai", "type": "x", "data": "a" * 70000}))
        await client.request("echo")
        assert len(errors(client)) == 31, "each one is still answered"
        async with httpx.AsyncClient() as http:
            await http.delete(f"{server.url}/api/sessions/{client.pc_id}")
            record = (await http.get(f"{server.url}/api/sessions/{client.pc_id}/transcript")).json()
    assert not record["live"]
    types = [e["type"] for e in record["events"]]
    assert "rtvi-error" not in types, "not an event (and a disk write) per message"
    [rejected] = [e for e in record["events"] if e["type"] == "rejected-messages"]
    counts = rejected["data"]["counts"]
    assert counts == {"malformed JSON": 30, "message too large": 1}
    assert rejected["data"]["total"] == 31
