"""Who may open a phone stream (server/api/phone_admission.py), tried as a hostile client
would against a real server: webhooks replayed, stream tokens reused or naming no call, two
streams for one call, one tenant ending another tenant's call, token calls taking every
slot, and input that once ended as tracebacks and secrets in the log."""

from __future__ import annotations

import asyncio
import json
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator

import httpx
import pytest

from server.telephony.signature import twilio_signature
from testkit.fake_twilio_rest import FakeTwilioRest, fake_twilio_rest
from testkit.openai_stub import OpenAIStub
from testkit.raw_websocket import TEXT, RawWebSocket, frame
from testkit.server_process import ServerProcess
from testkit.socket_callers import TwilioCaller

pytestmark = pytest.mark.e2e

ACCOUNT = "AC" + "0123456789abcdef" * 2
TOKEN = "twilio-auth-token"
PUBLIC = "https://agent.example.com"
KEYS = ["k-1", "k-2"]
MULAW = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}


@pytest.fixture(scope="module")
def rest() -> Iterator[FakeTwilioRest]:
    with fake_twilio_rest(ACCOUNT, TOKEN) as fake:
        yield fake


@pytest.fixture(scope="module")
def served(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub, rest: FakeTwilioRest
) -> ServerProcess:
    """Two API keys, Twilio's credentials, four slots (a key's share: two)."""
    return start_server(**stub.server_settings(
        public_url=PUBLIC, twilio_auth_token=TOKEN, twilio_account_sid=ACCOUNT,
        twilio_api_url=rest.url, api_keys=json.dumps(KEYS), max_sessions="4",
        log_level="INFO",
    ))  # fmt: skip


def ws_url(server: ServerProcess, query: str = "") -> str:
    return server.url.replace("http://", "ws://") + "/telephony/ws" + query


def new_sid() -> str:
    return "CA" + uuid.uuid4().hex


async def webhook(server: ServerProcess, call_sid: str) -> httpx.Response:
    form = {"CallSid": call_sid, "AccountSid": ACCOUNT, "From": "+14155550100"}
    signature = twilio_signature(TOKEN, f"{PUBLIC}/telephony/twiml", form)
    async with httpx.AsyncClient(base_url=server.url) as http:
        return await http.post("/telephony/twiml", data=form,
                               headers={"X-Twilio-Signature": signature})  # fmt: skip


async def token_for(server: ServerProcess, call_sid: str) -> str:
    answer = await webhook(server, call_sid)
    assert answer.status_code == 200, answer.text
    found = ET.fromstring(answer.text).find("./Connect/Stream/Parameter[@name='token']")
    assert found is not None
    return found.get("value", "")


async def closed_with(caller: TwilioCaller, within: float = 5.0) -> tuple[int | None, str]:
    await asyncio.wait_for(caller.closed.wait(), within)
    return caller.close_code, caller.close_reason


async def sessions(server: ServerProcess, key: str) -> list[dict[str, object]]:
    async with httpx.AsyncClient(base_url=server.url,
                                 headers={"Authorization": f"Bearer {key}"}) as http:  # fmt: skip
        return list((await http.get("/api/sessions")).json()["sessions"])


@pytest.mark.timeout(60)
async def test_a_signed_webhook_is_answered_once(served: ServerProcess) -> None:
    sid = new_sid()
    assert (await webhook(served, sid)).status_code == 200
    replayed = await webhook(served, sid)
    assert replayed.status_code == 409 and "answered already" in replayed.json()["error"]


@pytest.mark.timeout(60)
async def test_a_stream_token_opens_one_stream_and_must_name_its_call(
    served: ServerProcess,
) -> None:
    sid = new_sid()
    token = await token_for(served, sid)
    async with TwilioCaller(ws_url(served), {"token": token}, call_sid=sid) as first:
        await asyncio.sleep(0.5)
        assert not first.closed.is_set()
        async with TwilioCaller(ws_url(served), {"token": token}, call_sid=sid) as again:
            assert await closed_with(again) == (1008, "the stream token was used already")
    nameless = RawWebSocket()  # a valid token, and a start that names no call
    token = await token_for(served, new_sid())
    path = f"/telephony/ws?provider=twilio&token={token}"
    assert await nameless.open("127.0.0.1", served.port, path) == 101
    start = {"streamSid": "MZ1", "customParameters": {}, "mediaFormat": MULAW}
    await nameless.send(frame(TEXT, json.dumps({"event": "start", "start": start}).encode()))
    code, reason = await nameless.close_frame(5.0) or (None, "")
    nameless.abort()
    assert code == 1008 and "must name its call" in reason


@pytest.mark.timeout(60)
async def test_one_live_stream_per_call(served: ServerProcess) -> None:
    sid = new_sid()
    key = {"Authorization": "Bearer k-1"}
    async with TwilioCaller(ws_url(served), headers=key, call_sid=sid) as first:
        await asyncio.sleep(0.5)
        async with TwilioCaller(ws_url(served), headers=key, call_sid=sid) as second:
            assert await closed_with(second) == (1008, "a stream for this call is live already")
        assert not first.closed.is_set()


@pytest.mark.timeout(60)
async def test_a_key_cannot_hang_up_a_call_it_did_not_make(
    served: ServerProcess, rest: FakeTwilioRest
) -> None:
    """The second key's stream names the victim's CallSid, then deletes its own session:
    that used to hang the victim up through Twilio's REST API."""
    sid = new_sid()
    token = await token_for(served, sid)
    async with TwilioCaller(ws_url(served), {"token": token}, call_sid=sid) as victim:
        attacker = TwilioCaller(ws_url(served), headers={"Authorization": "Bearer k-2"},
                                call_sid=sid)  # fmt: skip
        async with attacker:
            await asyncio.sleep(0.5)
            mine = await sessions(served, "k-2")
            assert [s["call_id"] for s in mine] == [sid]
            headers = {"Authorization": "Bearer k-2"}
            async with httpx.AsyncClient(base_url=served.url, headers=headers) as http:
                assert (await http.delete(f"/api/sessions/{mine[0]['pc_id']}")).status_code == 200
            await closed_with(attacker)
        await asyncio.sleep(0.5)
        assert sid not in rest.hung_up
        assert not victim.closed.is_set()


@pytest.mark.timeout(60)
async def test_calls_let_in_by_stream_tokens_have_a_keys_share(served: ServerProcess) -> None:
    callers = []
    for _ in range(3):
        sid = new_sid()
        callers.append(TwilioCaller(ws_url(served), {"token": await token_for(served, sid)},
                                    call_sid=sid))  # fmt: skip
    async with callers[0], callers[1], callers[2]:
        code, reason = await closed_with(callers[2])
        assert code == 1013 and "without a key (stream tokens)" in reason
        async with TwilioCaller(ws_url(served), headers={"Authorization": "Bearer k-1"}) as keyed:
            await asyncio.sleep(0.5)
            assert not keyed.closed.is_set(), "a key's call still finds a slot"


@pytest.mark.timeout(60)
async def test_hostile_input_ends_in_a_refusal_not_a_traceback_nor_a_logged_secret(
    served: ServerProcess,
) -> None:
    rate = {"encoding": "base64", "sample_rate": "²"}
    exotel = {"event": "start", "stream_sid": "s1",
              "start": {"stream_sid": "s1", "call_sid": "c1", "media_format": rate}}  # fmt: skip
    long_sid = {"event": "start", "streamSid": "MZ1", "start": {"streamSid": "MZ1",
                "callSid": "CA" + "x" * 300, "mediaFormat": MULAW}}  # fmt: skip
    hostile = ["[" * 30_000 + "]" * 30_000, json.dumps(exotel), json.dumps(long_sid)]
    for message in hostile * 5:
        sock = RawWebSocket()
        assert await sock.open("127.0.0.1", served.port, "/telephony/ws?token=") == 101
        await sock.send(frame(TEXT, message.encode()))
        code, _ = await sock.close_frame(5.0) or (None, "")
        sock.abort()
        assert code == 1008
    # An admitted stream (by key, in the URL) whose marks are named with a digit '²'.
    keyed = TwilioCaller(ws_url(served, "?api_key=k-1"), call_sid=new_sid())
    async with keyed:
        assert keyed.ws is not None
        await keyed.ws.send(json.dumps({"event": "mark", "streamSid": keyed.stream_sid,
                                        "mark": {"name": "²"}}))  # fmt: skip
        await asyncio.sleep(0.5)
        assert not keyed.closed.is_set()
    too_long = await webhook(served, "CA" + "x" * 198)
    assert too_long.status_code == 400 and "CallSid" in too_long.json()["error"]
    token = await token_for(served, new_sid())
    async with TwilioCaller(ws_url(served, f"?token={token}")) as other:  # another call's
        await closed_with(other)
    await asyncio.sleep(0.5)
    log = served.log()
    assert "Traceback" not in log
    assert not [line for line in log.splitlines() if line.startswith("ERROR") or "| ERROR" in line]
    assert "api_key=[redacted]" in log and "k-1" not in log
    assert "token=[redacted]" in log and token not in log
