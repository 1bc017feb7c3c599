"""The data channel over a real peer connection: RTVI requests, bad messages, signalling."""

from __future__ import annotations

import json

import httpx
import pytest

from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e


def errors(client: RTCTestClient) -> list[dict]:
    return [m for m in client.messages if m.get("type") in ("error", "error-response")]


async def assert_still_serving(client: RTCTestClient) -> None:
    reply = await client.request("echo", {"n": 1})
    assert reply["type"] == "server-response"
    assert reply["data"] == {"t": "echo", "d": {"n": 1}}


@pytest.mark.parametrize(
    ("raw", "expected_type", "text"),
    [
        ("{not json", "error", "malformed JSON"),
        ("[1, 2, 3]", "error", "must be a JSON object"),
        ('"just a string"', "error", "must be a JSON object"),
        ('{"type": "client-ready", "id": "a1"}', "error-response", "label"),
        ('{"label": "rtvi-ai", "type": "client-ready"}', "error", "id"),
        ('{"label": "rtvi-ai", "type": 7, "id": "a2"}', "error-response", "type"),
        ('{"label": "rtvi-ai", "type": "make-coffee", "id": "a3"}', "error-response",
         "unknown message type"),
        ('{"label": "rtvi-ai", "type": "client-message", "id": "a4", "data": {"t": 5}}',
         "error-response", "invalid client-message data: t"),
        ('{"label": "rtvi-ai", "type": "client-message", "id": "a5", "data": "x"}',
         "error-response", "data"),
        ('{"label": "rtvi-ai", "type": "send-text", "id": "a6", "data": {}}',
         "error-response", "content"),
        ('{"label": "rtvi-ai", "type": "client-message", "id": "a7", "data": {"t": "nope"}}',
         "error-response", "no handler for client-message 'nope'"),
    ],
)  # fmt: skip
async def test_bad_messages_get_errors_and_the_session_stays_up(
    pair: tuple[RTCTestClient, RTCTestClient], raw: str, expected_type: str, text: str
) -> None:
    victim, bystander = pair
    victim.send_raw(raw)
    reply = await victim.wait_for(lambda m: m.get("type") in ("error", "error-response"))
    assert reply["type"] == expected_type
    assert text in reply["data"]["error"]
    if expected_type == "error":
        assert reply["data"]["fatal"] is False
    else:
        assert reply["id"] == json.loads(raw)["id"]
    await assert_still_serving(victim)
    await assert_still_serving(bystander)
    assert errors(bystander) == []


async def test_oversized_message_is_refused(pair: tuple[RTCTestClient, RTCTestClient]) -> None:
    victim, bystander = pair
    victim.send_raw(json.dumps({"label": "rtvi-ai", "type": "x", "id": "1", "data": "a" * 70000}))
    reply = await victim.wait_for(lambda m: m.get("type") == "error")
    assert "message too large" in reply["data"]["error"]
    await assert_still_serving(victim)
    await assert_still_serving(bystander)


async def test_client_ready_with_unsupported_version(
    pair: tuple[RTCTestClient, RTCTestClient],
) -> None:
    victim, _ = pair
    msg_id = victim.send_rtvi("client-ready", {"version": "9.0.0", "about": {"library": "x"}})
    complaint = await victim.wait_for(
        lambda m: m.get("type") == "error-response" and m.get("id") == msg_id
    )
    assert "unsupported RTVI version '9.0.0'" in complaint["data"]["error"]
    ready = await victim.wait_for(lambda m: m.get("type") == "bot-ready" and m.get("id") == msg_id)
    assert ready["data"]["version"] == "1.4.0"


async def test_client_ready_accepts_protocol_1(server: ServerProcess) -> None:
    async with RTCTestClient(server.url) as client:
        msg_id = client.send_rtvi("client-ready", {"version": "1.0.0", "about": {"library": "o"}})
        ready = await client.wait_for(lambda m: m.get("type") == "bot-ready" and m["id"] == msg_id)
        assert ready["data"]["about"]["library"] == "parley"
        assert not [m for m in errors(client) if m.get("id") == msg_id]


async def test_track_status_signalling_is_recorded(
    server: ServerProcess, pair: tuple[RTCTestClient, RTCTestClient]
) -> None:
    victim, _ = pair
    victim.send_raw(
        json.dumps(
            {
                "type": "signalling",
                "message": {"type": "trackStatus", "receiver_index": 0, "enabled": False},
            }
        )
    )
    info = (await victim.request("session-info"))["data"]["d"]
    assert info["pc_id"] == victim.pc_id
    assert info["track_status"] == {"0": False}
    assert errors(victim) == []
    async with httpx.AsyncClient() as http:
        listed = (await http.get(f"{server.url}/api/sessions/{victim.pc_id}")).json()
    assert listed["data_channel_open"] is True
