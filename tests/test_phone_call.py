"""Phone calls through Twilio Media Streams, end to end: Twilio's webhook answered with
TwiML (its signature checked), then a fake Twilio speaking the real Media Streams
protocol over a real WebSocket on 127.0.0.1 to a real server with the real VAD (the
models are the OpenAI-compatible stub, the REST API a local fake of Twilio's)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus

from server.telephony.signature import twilio_signature
from testkit.fake_twilio_rest import FakeTwilioRest, fake_twilio_rest
from testkit.openai_stub import OpenAIStub
from testkit.server_process import ServerProcess
from testkit.socket_callers import TelnyxCaller, TwilioCaller
from testkit.speech import espeak

pytestmark = pytest.mark.e2e

ACCOUNT = "AC" + "0123456789abcdef" * 2
TOKEN = "twilio-auth-token"
PUBLIC = "https://agent.example.com"
QUESTION = "When does the pharmacy open on Sundays?"
ANSWER = "On Sundays the pharmacy opens at ten in the morning and closes at four."


@pytest.fixture(scope="module")
def rest() -> Iterator[FakeTwilioRest]:
    with fake_twilio_rest(ACCOUNT, TOKEN) as fake:
        yield fake


def phone_settings(stub: OpenAIStub, rest: FakeTwilioRest, **more: str) -> dict[str, str]:
    return stub.server_settings(
        preload_models="true", greeting="Hello, thanks for calling.", public_url=PUBLIC,
        twilio_auth_token=TOKEN, twilio_account_sid=ACCOUNT, twilio_api_url=rest.url,
        telephony_end_digit="#", **more,
    )  # fmt: skip


@pytest.fixture(scope="module")
def served(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub, rest: FakeTwilioRest
) -> ServerProcess:
    stub.config.default_text = ANSWER
    stub.config.transcript = QUESTION
    stub.config.tts_seconds_per_char = 0.05  # the answer lasts 3.6 s: time to barge in
    server = start_server(**phone_settings(stub, rest))
    server.wait_models_ready()
    return server


def ws_url(server: ServerProcess) -> str:
    return server.url.replace("http://", "ws://") + "/telephony/ws"


async def webhook(server: ServerProcess, call_sid: str, sign: bool = True) -> httpx.Response:
    """Twilio's voice webhook for a new call, signed as Twilio signs it."""
    form = {"CallSid": call_sid, "AccountSid": ACCOUNT, "From": "+14155550100",
            "To": "+14155550199", "Direction": "inbound"}  # fmt: skip
    url = f"{PUBLIC}/telephony/twiml?agent=front-desk"
    signature = twilio_signature(TOKEN, url, form) if sign else "bad"
    async with httpx.AsyncClient(base_url=server.url) as http:
        return await http.post("/telephony/twiml?agent=front-desk", data=form,
                               headers={"X-Twilio-Signature": signature})  # fmt: skip


def stream_parameters(twiml: str) -> tuple[str, dict[str, str]]:
    stream = ET.fromstring(twiml).find("./Connect/Stream")
    assert stream is not None
    params = {p.get("name", ""): p.get("value", "") for p in stream.findall("Parameter")}
    return stream.get("url", ""), params


def new_sid() -> str:
    return "CA" + uuid.uuid4().hex


async def connected_call(server: ServerProcess) -> TwilioCaller:
    sid = new_sid()
    answer = await webhook(server, sid)
    assert answer.status_code == 200, answer.text
    url, params = stream_parameters(answer.text)
    assert url == "wss://agent.example.com/telephony/ws"
    assert params["agent"] == "front-desk" and params["From"] == "+14155550100"
    return TwilioCaller(ws_url(server), parameters=params, call_sid=sid)


def chat_texts(stub: OpenAIStub) -> list[str]:
    texts = []
    for request in stub.requests("/v1/chat/completions"):
        for message in request.body.get("messages", []):
            if message.get("role") == "user" and isinstance(message.get("content"), str):
                texts.append(message["content"])
    return texts


def events(caller: TwilioCaller, kind: str) -> list[float]:
    return [at for at, msg in caller.events if msg.get("event") == kind]


@pytest.mark.timeout(120)
async def test_a_phone_call_is_greeted_answered_keyed_in_and_barged_in_on(
    served: ServerProcess, stub: OpenAIStub, rest: FakeTwilioRest
) -> None:
    caller = await connected_call(served)
    async with caller:
        await caller.wait_for(lambda: caller.bot_seconds() > 1.0, within=10)  # the greeting
        await asyncio.sleep(1.0)
        caller.say(espeak(QUESTION))
        asked = time.monotonic()
        await caller.wait_for(lambda: caller.bot_audio_after(asked + 1.5), within=20)
        assert QUESTION in chat_texts(stub)
        # The caller talks over the answer: Twilio is told to drop what it buffered.
        await asyncio.sleep(0.8)
        barge = time.monotonic()
        caller.say(espeak("Sorry, what about Saturdays?"))
        await caller.wait_for(lambda: [t for t in events(caller, "clear") if t > barge], 5)
        await asyncio.sleep(1.0)
        for digit in "42#":
            await caller.press(digit)
            await asyncio.sleep(0.2)
        await stub.wait_for(lambda: "(pressed on the keypad: 42)" in chat_texts(stub), 10)
        sid = caller.call_sid
        async with httpx.AsyncClient(base_url=served.url) as http:
            listed = (await http.get("/api/sessions")).json()["sessions"]
        mine = [s for s in listed if s.get("call_id") == sid]
        assert mine and mine[0]["transport"] == "phone" and mine[0]["provider"] == "twilio"
        assert mine[0]["request_data"]["parameters"]["agent"] == "front-desk"
        assert "token" not in mine[0]["request_data"]["parameters"]
        await caller.hang_up()
    async with httpx.AsyncClient(base_url=served.url) as http:
        for _ in range(50):
            listed = (await http.get("/api/sessions")).json()["sessions"]
            if not any(s.get("call_id") == sid for s in listed):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the call outlived the caller's hang-up")
    assert sid not in rest.hung_up, "the caller hung up: nothing to hang up at Twilio"


@pytest.mark.timeout(60)
async def test_a_call_the_server_ends_is_hung_up_at_twilio(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub, rest: FakeTwilioRest
) -> None:
    server = start_server(**phone_settings(stub, rest, max_session_seconds="3"))
    caller = await connected_call(server)
    async with caller:
        await asyncio.wait_for(caller.closed.wait(), 15)
    assert caller.close_code == 1008 and "maximum duration" in caller.close_reason
    assert rest.hung_up.count(caller.call_sid) == 1


@pytest.mark.timeout(60)
async def test_streams_without_a_valid_token_or_in_a_wrong_format_are_refused(
    served: ServerProcess,
) -> None:
    async def refused(caller: TwilioCaller) -> str:
        async with caller:
            await asyncio.wait_for(caller.closed.wait(), 5)
        assert caller.close_code == 1008
        return caller.close_reason

    assert "token" in await refused(TwilioCaller(ws_url(served)))
    assert "token" in await refused(TwilioCaller(ws_url(served), {"token": "x.1.y"}))
    other = await connected_call(served)  # a valid token, but for another call
    stolen = TwilioCaller(ws_url(served), other.parameters, call_sid=new_sid())
    assert "another call" in await refused(stolen)
    alaw = await connected_call(served)
    original = alaw.opened

    async def opened_in_alaw() -> None:
        assert alaw.ws is not None
        await alaw.ws.send('{"event": "connected"}')
        start = {
            "event": "start",
            "streamSid": alaw.stream_sid,
            "start": {
                "streamSid": alaw.stream_sid,
                "callSid": alaw.call_sid,
                "customParameters": alaw.parameters,
                "mediaFormat": {"encoding": "audio/x-alaw", "sampleRate": 8000, "channels": 1},
            },
        }
        import json

        await alaw.ws.send(json.dumps(start))

    alaw.opened = opened_in_alaw  # type: ignore[method-assign]
    assert "media format" in await refused(alaw)
    del original
    async with httpx.AsyncClient(base_url=served.url) as http:
        listed = (await http.get("/api/sessions")).json()["sessions"]
    assert not [s for s in listed if s.get("transport") == "phone"], "none was served"


@pytest.mark.timeout(30)
async def test_the_webhook_needs_twilios_signature(served: ServerProcess) -> None:
    answer = await webhook(served, new_sid(), sign=False)
    assert answer.status_code == 403 and "X-Twilio-Signature" in answer.json()["error"]


async def interrupted_answer(server: ServerProcess, playout_delay: float) -> str:
    """The answer as kept in the context after the caller talked over it 1.5 s in, with
    Twilio playing what it is sent ``playout_delay`` s late."""
    caller = await connected_call(server)
    caller.playout_delay = playout_delay
    async with caller:
        await caller.wait_for(lambda: caller.bot_seconds() > 1.0, within=10)
        await asyncio.sleep(1.5)
        asked = caller.say(espeak(QUESTION))
        await caller.wait_for(lambda: caller.bot_audio_after(asked + 1.5), within=20)
        await asyncio.sleep(1.5)
        barge = caller.say(espeak("Sorry, what about Saturdays?"))
        await caller.wait_for(lambda: [t for t in events(caller, "clear") if t > barge], 5)
        await asyncio.sleep(1.5)
        async with httpx.AsyncClient(base_url=server.url) as http:
            listed = (await http.get("/api/sessions")).json()["sessions"]
        mine = next(s for s in listed if s.get("call_id") == caller.call_sid)
        said = [m["content"] for m in mine["conversation"]["transcript"]
                if m["role"] == "assistant" and isinstance(m.get("content"), str)]  # fmt: skip
    cut = [text for text in said if text != ANSWER and ANSWER.startswith(text.rstrip(".…"))]
    assert cut, f"no interrupted answer among {said}"
    return cut[0]


@pytest.mark.timeout(120)
async def test_a_barge_in_keeps_only_the_words_the_caller_heard(served: ServerProcess) -> None:
    on_arrival = await interrupted_answer(served, 0.0)
    late = await interrupted_answer(served, 1.0)
    # A second of the answer (about 4 of its 14 words) was sent but not yet heard.
    assert len(late.split()) <= len(on_arrival.split()) - 2, (late, on_arrival)


@pytest.mark.timeout(90)
async def test_a_telnyx_call_with_an_api_key_is_answered_in_its_codecs(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub
) -> None:
    stub.config.default_text, stub.config.transcript = ANSWER, QUESTION
    stub.config.tts_seconds_per_char = 0.05
    greeting = "Hello, thanks for calling."
    server = start_server(**stub.server_settings(api_keys='["k-1"]', greeting=greeting,
                                                 public_url=PUBLIC))  # fmt: skip
    refused = await webhook(server, new_sid())  # no Twilio token to check its signature
    assert refused.status_code == 403 and "PARLEY_TWILIO_AUTH_TOKEN" in refused.json()["error"]
    url = ws_url(server)
    with pytest.raises(InvalidStatus) as refused:  # no token can be issued: refused at once
        async with TelnyxCaller(url):
            pass
    assert refused.value.response.status_code == 401
    assert "API key" in json.loads(refused.value.response.body)["error"]
    async with TelnyxCaller(url + "?api_key=k-1") as caller:
        await caller.wait_for(lambda: caller.bot_seconds() > 1.0, within=10)  # the greeting
        await asyncio.sleep(1.0)
        asked = caller.say(espeak(QUESTION))
        await caller.wait_for(lambda: caller.bot_audio_after(asked + 1.5), within=20)
        await asyncio.sleep(0.8)
        barge = caller.say(espeak("Sorry, what about Saturdays?"))
        await caller.wait_for(lambda: [t for t in events(caller, "clear") if t > barge], 5)
        async with httpx.AsyncClient(base_url=server.url,
                                     headers={"Authorization": "Bearer k-1"}) as http:  # fmt: skip
            listed = (await http.get("/api/sessions")).json()["sessions"]
        mine = [s for s in listed if s.get("call_id") == caller.call_control_id]
        assert mine and mine[0]["provider"] == "telnyx" and mine[0]["marks_played"] > 0


@pytest.mark.timeout(60)
async def test_phone_calls_from_the_providers_networks_are_not_held_to_the_address_caps(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub
) -> None:
    """Every call comes from the provider's servers: a cap per address would cap them all.
    Everyone else's streams are held to it, as any client is."""
    caps = {"max_sessions_per_address": "1", "max_sessions_per_network": "1"}
    trusting = start_server(
        **stub.server_settings(**caps, telephony_trusted_networks="127.0.0.0/8")
    )
    async with TwilioCaller(ws_url(trusting)) as one, TwilioCaller(ws_url(trusting)) as two:
        await asyncio.sleep(1.0)
        assert not one.closed.is_set() and not two.closed.is_set()
        async with httpx.AsyncClient(base_url=trusting.url) as http:
            listed = (await http.get("/api/sessions")).json()["sessions"]
        assert len([s for s in listed if s["transport"] == "phone"]) == 2
    capped = start_server(**stub.server_settings(**caps))
    async with TwilioCaller(ws_url(capped)) as one, TwilioCaller(ws_url(capped)) as two:
        await asyncio.wait_for(two.closed.wait(), 5)
        assert two.close_code == 1013 and "from this address" in two.close_reason
        assert not one.closed.is_set()


@pytest.mark.timeout(60)
async def test_an_agents_keypad_hook_can_end_the_call(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub, rest: FakeTwilioRest
) -> None:
    agent = Path(__file__).parent / "agent_files" / "phone_desk.py"
    server = start_server(**phone_settings(stub, rest, agent=str(agent)))
    caller = await connected_call(server)
    async with caller:
        await caller.wait_for(lambda: caller.bot_seconds() > 0.2, within=10)  # the greeting
        await caller.press("5")
        await asyncio.sleep(0.5)
        assert not caller.closed.is_set()
        await caller.press("0")
        await asyncio.wait_for(caller.closed.wait(), 10)
    assert rest.hung_up.count(caller.call_sid) == 1, "ended by the agent: hung up at Twilio"


async def answering_call(server: ServerProcess) -> tuple[TwilioCaller, str, float]:
    """A connected call whose question is being answered: the caller, its session id and
    when the answer's audio began."""
    caller = await connected_call(server)
    await caller.__aenter__()
    await caller.wait_for(lambda: caller.bot_seconds() > 1.0, within=10)
    await asyncio.sleep(1.0)
    asked = caller.say(espeak(QUESTION))
    await caller.wait_for(lambda: caller.bot_audio_after(asked + 1.5), within=20)
    answer = caller.bot_audio_after(asked + 1.5) or 0.0
    async with httpx.AsyncClient(base_url=server.url) as http:
        listed = (await http.get("/api/sessions")).json()["sessions"]
    pc_id = next(s["pc_id"] for s in listed if s.get("call_id") == caller.call_sid)
    return caller, pc_id, answer


@pytest.mark.timeout(90)
async def test_a_backchannel_on_the_phone_does_not_stop_the_answer(
    served: ServerProcess, stub: OpenAIStub
) -> None:
    caller, _, answer = await answering_call(served)
    try:
        asked = len(stub.requests("/v1/chat/completions"))
        await asyncio.sleep(0.8)
        stub.script_stt("Yeah.")  # what the STT hears of it
        said = caller.say(espeak("yeah"))
        await asyncio.sleep(2.0)
        # The answer went on after the "yeah" (paused at most), and no new one was asked.
        assert caller.bot_audio_after(said + 1.2) is not None
        assert len(stub.requests("/v1/chat/completions")) == asked
        assert answer < said
    finally:
        await caller.__aexit__(None, None, None)


@pytest.mark.timeout(90)
async def test_a_caller_who_drops_mid_answer_ends_the_call_with_its_transcript_kept(
    served: ServerProcess, rest: FakeTwilioRest
) -> None:
    caller, pc_id, _ = await answering_call(served)
    await asyncio.sleep(0.5)
    assert caller.ws is not None
    await caller.ws.close()  # no stop: the line just went
    await caller.__aexit__(None, None, None)
    async with httpx.AsyncClient(base_url=served.url) as http:
        for _ in range(50):
            record = (await http.get(f"/api/sessions/{pc_id}/transcript")).json()
            if not record["live"]:
                break
            await asyncio.sleep(0.1)
    assert not record["live"] and record["close_reason"] == "the client hung up"
    turns = [(t["role"], t["text"]) for t in record["turns"]]
    assert ("user", QUESTION) in turns
    assert any(role == "assistant" and ANSWER.startswith(text.rstrip(".…")) for role, text in turns)
    assert caller.call_sid not in rest.hung_up
