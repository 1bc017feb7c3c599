"""Property-based fuzzing: HTTP bodies and headers, SDP offers, RTVI messages.

Whatever arrives, the server answers with a 4xx (or a success), never a 500, logs no
error, leaks no session and leaves a healthy session beside it working. HTTP runs
against the real app in-process (lifespan started, an aiortc peer connected beside);
RTVI runs through the real channel → handler dispatch in-process, then over a real data
channel to a real server whose models are the OpenAI stub. Strategies:
testkit/fuzz_strategies.py. Examples are the same on every run (derandomize).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loguru import logger
from pyee import EventEmitter

from server.api.app import create_app
from server.media.data_channel import ChatChannel
from server.rtvi.handler import DEFAULT_CLIENT_MESSAGE_HANDLERS, RTVIHandler
from server.rtvi.protocol import ClientReadyData, RTVIError, SendTextData
from server.settings import Settings
from testkit.fuzz_strategies import (
    BODIES,
    CONTENT_TYPES,
    LIVE,
    OVER_THE_WIRE,
    PC_IDS,
    ROUTES,
    SESSION_IDS,
    START,
    header_text,
    offers,
    payloads,
)
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient, split_candidates
from testkit.server_process import ServerProcess

# e2e for its cost: thousands of generated inputs (~25 s), and a real server for one test.
pytestmark = pytest.mark.e2e

KEY = "fuzz-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
ORIGIN = "https://allowed.example.test"


def fuzz(max_examples: int) -> Callable[[Any], Any]:
    """Reproducible and bounded: the same examples on every run, no example database."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


# -- the app in-process, with a watch on errors ---------------------------------------------------


class Problems:
    """Errors logged by the server and exceptions nobody retrieved, while it lives."""

    def __init__(self) -> None:
        self.found: list[str] = []

    @contextlib.contextmanager
    def watching(self) -> Iterator[Problems]:
        sink = logger.add(lambda message: self.found.append(str(message)), level="ERROR")
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()
        loop.set_exception_handler(lambda _loop, ctx: self.found.append(str(ctx)))
        try:
            yield self
        finally:
            loop.set_exception_handler(previous)
            logger.remove(sink)


class App:
    """The ASGI app with its lifespan running, an HTTP client, and one live session."""

    def __init__(self, app: FastAPI, http: httpx.AsyncClient, problems: Problems) -> None:
        self.app = app
        self.http = http
        self.problems = problems
        self.live_pc_id = ""
        self.start_id = ""
        self.offer_sdp = ""

    def bind(self, value: Any) -> Any:
        """``value`` with the stand-ins replaced by this app's real ids."""
        if isinstance(value, str):
            return {LIVE: self.live_pc_id, START: self.start_id}.get(value, value)
        if isinstance(value, list):
            return [self.bind(v) for v in value]
        if isinstance(value, dict):
            return {k: self.bind(v) for k, v in value.items()}
        return value

    @property
    def sessions(self) -> dict[str, Any]:
        return self.app.state.registry.sessions

    async def tidy(self) -> None:
        """Close every session but the watching one; keep a /start id waiting."""
        for pc_id in set(self.sessions) - {self.live_pc_id}:
            await self.request("DELETE", f"/api/sessions/{pc_id}", headers=AUTH)
        assert set(self.sessions) == {self.live_pc_id}
        if self.start_id not in self.app.state.registry.starts:
            started = await self.request("POST", "/start", json={}, headers=AUTH)
            self.start_id = started.json()["sessionId"]

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = await self.http.request(method, path, **kwargs)
        status = response.status_code
        assert status < 500 or status == 503, (method, path, status, response.text)
        if status == 503:  # full (e.g. too many /start ids waiting): a limit, not a crash
            assert int(response.headers["retry-after"]) > 0
        if response.status_code >= 400:
            body = response.json()
            assert isinstance(body["error"], str) and body["error"], body
        assert not self.problems.found, self.problems.found
        return response


@pytest.fixture
async def app() -> AsyncIterator[App]:
    settings_ = Settings(
        preload_models=False,
        greeting="",
        api_keys=[KEY],
        cors_origins=[ORIGIN],
        session_rate_per_minute=0,
        max_sessions=8,
        max_session_candidates=10**6,
        liveness_timeout=60,
    )
    application = create_app(settings_)
    problems = Problems()
    transport = httpx.ASGITransport(app=application, client=("203.0.113.9", 40000))
    with problems.watching():
        async with (
            application.router.lifespan_context(application),
            httpx.AsyncClient(transport=transport, base_url="http://parley.test") as http,
        ):
            state = App(application, http, problems)
            # A connected session (real ICE, DTLS, data channel over loopback) that every
            # request of the fuzz must leave alone.
            peer = RTCTestClient("http://parley.test")
            await peer.http.aclose()
            peer.http = httpx.AsyncClient(
                transport=transport, base_url="http://parley.test", headers=AUTH, timeout=20
            )
            try:
                await peer.connect()
                state.live_pc_id = peer.pc_id or ""
                state.offer_sdp, _ = split_candidates(peer.pc.localDescription.sdp)
                await state.tidy()
                yield state
                reply = await peer.request("echo", "still here")
                assert reply["type"] == "server-response" and reply["data"]["d"] == "still here"
                assert not [m for m in peer.messages if m.get("type") == "error"]
            finally:
                await peer.close()
    assert not problems.found, problems.found


# -- HTTP bodies and headers --------------------------------------------------------------------


@fuzz(max_examples=400)
@given(route=st.sampled_from(ROUTES), sid=SESSION_IDS, pc=PC_IDS, body=BODIES)
async def test_http_bodies_of_any_shape(
    app: App, route: tuple[str, str], sid: str, pc: str, body: Any
) -> None:
    method, path = route
    if method == "DELETE" and pc == LIVE:
        pc = "nope"  # keep the watching session
    path = path.format(sid=app.bind(sid), pc=app.bind(pc))
    body = app.bind(body)
    if method == "POST" and isinstance(body, dict) and body.get("pc_id") == app.live_pc_id:
        body["restart_pc"] = False  # keep the watching session (restarts: test below)
    try:
        await app.request(method, path, json=body, headers=AUTH)
    finally:
        await app.tidy()


@fuzz(max_examples=250)
@given(
    route=st.sampled_from([r for r in ROUTES if r[0] != "GET"]),
    content=st.binary(max_size=200) | st.text(max_size=200).map(str.encode),
    content_type=st.sampled_from(CONTENT_TYPES) | header_text,
    authorization=st.sampled_from([f"Bearer {KEY}", "Bearer", "", f"bearer {KEY}", "Basic x"])
    | header_text,
    origin=st.none() | st.sampled_from([ORIGIN, "null", "https://evil.test"]) | header_text,
    extra=st.dictionaries(st.sampled_from(["content-length", "x-forwarded-for", "accept",
                                           "transfer-encoding", "host"]), header_text, max_size=2),
)  # fmt: skip
async def test_http_raw_bytes_and_headers(
    app: App,
    route: tuple[str, str],
    content: bytes,
    content_type: str,
    authorization: str,
    origin: str | None,
    extra: dict[str, str],
) -> None:
    method, path = route
    headers = {"content-type": content_type, "authorization": authorization, **extra}
    if origin is not None:
        headers["origin"] = origin
    # httpx sets these itself; a wrong content-length would only hang the client.
    headers.pop("content-length", None)
    headers.pop("transfer-encoding", None)
    headers.pop("host", None)
    path = path.format(sid=app.start_id, pc="nope")
    response = await app.request(method, path, content=content, headers=headers)
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or token.strip() != KEY:
        # Without the key nothing is served; only unparseable JSON is refused before that.
        unparseable = ("the request body is not valid JSON", "There was an error parsing the body")
        assert response.status_code == 401 or (
            response.status_code == 400 and response.json()["error"] in unparseable
        ), response.text
    if origin == ORIGIN:
        assert response.headers["access-control-allow-origin"] == ORIGIN
    elif origin is not None:
        assert "access-control-allow-origin" not in response.headers


# -- SDP ---------------------------------------------------------------------------------------


@fuzz(max_examples=150)
@given(data=st.data())
async def test_sdp_offers_random_and_mutated(app: App, data: st.DataObject) -> None:
    sdp = data.draw(offers(app.offer_sdp))
    target = data.draw(st.sampled_from(["new", "new", "renegotiate", "restart", "start"]))
    body: dict[str, Any] = {"sdp": sdp, "type": "offer"}
    path = "/api/offer"
    if target in ("renegotiate", "restart"):
        # Renegotiate the session we own (a restart makes a fresh one under its id).
        owned = await app.request("POST", "/api/offer", json={"sdp": app.offer_sdp}, headers=AUTH)
        body |= {"pc_id": owned.json()["pc_id"], "restart_pc": target == "restart"}
    elif target == "start":
        path = f"/sessions/{app.start_id}/api/offer"
    before = len(app.sessions)
    try:
        response = await app.request("POST", path, json=body, headers=AUTH)
        assert response.status_code in (200, 400), response.text
        if response.status_code == 400:
            assert len(app.sessions) <= before, "a refused offer leaves no session behind"
    finally:
        await app.tidy()


# -- RTVI through the channel and the handler, in-process ---------------------------------------


class FakeDataChannel(EventEmitter):
    """An open data channel whose messages we emit and whose sends we keep."""

    readyState = "open"

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[dict[str, Any]] = []

    def send(self, text: str) -> None:
        self.sent.append(json.loads(text))


class RecordingSession:
    """What RTVIHandler serves, recording what it is asked to do."""

    def __init__(self) -> None:
        self.channel = ChatChannel(
            on_alive=lambda: None,
            on_signalling=lambda message: None,
            on_rtvi=lambda raw: self.handler.handle(raw),
            on_invalid=lambda reason: self.handler.report(RTVIError(reason)),
        )
        self.handler = RTVIHandler(self, dict(DEFAULT_CLIENT_MESSAGE_HANDLERS), max_text_chars=40)
        self.wire = FakeDataChannel()
        self.channel.attach(self.wire)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.texts: list[SendTextData] = []
        self.ready: list[ClientReadyData] = []
        self.closes: list[str] = []

    def send(self, msg: dict[str, Any]) -> None:
        self.channel.send(msg)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self.tasks.add(task)
        return task

    def set_client(self, ready: ClientReadyData) -> None:
        self.ready.append(ready)

    def send_text(self, data: SendTextData) -> None:
        self.texts.append(data)

    def request_close(self, reason: str) -> None:
        self.closes.append(reason)

    def info(self) -> dict[str, Any]:
        return {"pc_id": "recording"}


@pytest.fixture
async def problems() -> AsyncIterator[Problems]:
    with Problems().watching() as watching:
        yield watching


@fuzz(max_examples=1500)
@given(payload=payloads)
async def test_rtvi_messages_through_the_dispatch_path(
    problems: Problems, payload: str | bytes
) -> None:
    session = RecordingSession()
    session.wire.emit("message", payload)
    await asyncio.gather(*session.tasks)
    assert not problems.found, problems.found
    replies = session.wire.sent
    assert all(r.get("label") == "rtvi-ai" for r in replies)
    text = payload.decode(errors="replace") if isinstance(payload, bytes) else payload
    if text.startswith("ping"):
        assert replies == []
        return
    try:
        msg = json.loads(text)
    except ValueError:
        assert [r["type"] for r in replies] == ["error"]
        assert replies[0]["data"]["fatal"] is False
        return
    if isinstance(msg, dict) and msg.get("type") == "signalling":
        assert replies == []
        return
    served = (
        len(session.texts) + len(session.ready) + len(session.closes)
        + sum(r["type"] in ("server-response", "bot-ready") for r in replies)
    )  # fmt: skip
    complaints = [r for r in replies if r["type"] in ("error", "error-response")]
    # Every message is either served or refused with a reason (a version warning may go
    # with a bot-ready); an id, when there was one, is answered.
    assert served + len(complaints) >= 1, (msg, replies)
    msg_id = msg.get("id") if isinstance(msg, dict) else None
    if isinstance(msg_id, str) and complaints:
        assert all(r.get("id") == msg_id for r in complaints)
    if msg_id is not None and not isinstance(msg_id, str):
        assert all("id" not in r for r in complaints)


# -- RTVI over a real data channel ---------------------------------------------------------------


@pytest.fixture(scope="module")
def stub_server(start_server: Callable[..., ServerProcess]) -> Iterator[ServerProcess]:
    """Models at the OpenAI stub, so that a valid send-text really runs a bot turn."""
    with OpenAIStub() as stub:
        yield start_server(
            **stub.server_settings(
                message_rate="100000", message_burst="100000", max_text_chars="200"
            )
        )


@pytest.fixture
async def pair(stub_server: ServerProcess) -> AsyncIterator[tuple[RTCTestClient, RTCTestClient]]:
    clients = (RTCTestClient(stub_server.url), RTCTestClient(stub_server.url))
    for client in clients:
        await client.connect()
    yield clients
    for client in clients:
        reply = await client.request("echo", "after the fuzz")
        assert reply["data"]["d"] == "after the fuzz"
    for client in clients:
        await client.close()
    log = stub_server.log()
    assert " | ERROR " not in log and "Traceback" not in log, log[-3000:]


@fuzz(max_examples=100)
@given(data=st.data())
async def test_rtvi_messages_over_a_real_data_channel(
    pair: tuple[RTCTestClient, RTCTestClient], data: st.DataObject
) -> None:
    victim, bystander = pair
    payload = data.draw(OVER_THE_WIRE)
    victim.send_raw(payload)
    probe = data.draw(st.sampled_from([victim, bystander]))
    reply = await probe.request("echo", payload[:20])
    assert reply["type"] == "server-response" and reply["data"]["d"] == payload[:20]
