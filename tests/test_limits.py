"""Every limit: under it works, over it gets a clear error, the neighbour never notices."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from server.guards.rate_limit import KeyedRateLimiter, TokenBucket
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the rate limiter on its own -----------------------------------------------------------------


def test_token_bucket_allows_a_burst_then_the_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=2.0, burst=3, clock=clock)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.5)  # one token every 0.5 s
    clock.now += 0.5
    assert bucket.take() == 0.0
    assert bucket.take() > 0
    clock.now += 100  # refills, but never beyond the burst
    assert [bucket.take() for _ in range(4)][-1] > 0


def test_keyed_limiter_separates_keys_and_forgets_idle_ones() -> None:
    clock = FakeClock()
    limiter = KeyedRateLimiter(rate=1.0, burst=2, max_keys=100, clock=clock)
    assert limiter.take("a") == 0.0 and limiter.take("a") == 0.0
    assert limiter.take("a") == pytest.approx(1.0)
    assert limiter.take("b") == 0.0, "another key has its own bucket"
    clock.now += 10
    limiter.forget_idle()
    assert len(limiter) == 0, "full buckets are forgotten"


def test_keyed_limiter_memory_is_bounded() -> None:
    clock = FakeClock()
    limiter = KeyedRateLimiter(rate=0.001, burst=1, max_keys=50, clock=clock)
    for i in range(10_000):
        limiter.take(f"10.0.{i // 256}.{i % 256}")
        assert len(limiter) <= 50
    assert limiter.take("10.0.39.15") > 0, "a recent key is still limited"


# -- HTTP limits --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def limited(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server(
        max_sdp_bytes="8192",
        max_candidates="8",
        max_session_candidates="30",
        max_message_bytes="2048",
        message_rate="5",
        message_burst="10",
        max_text_chars="100",
    )


@pytest.fixture
async def pair(limited: ServerProcess) -> AsyncIterator[tuple[RTCTestClient, RTCTestClient]]:
    """Two connected sessions: the first goes over a limit, the second must not notice."""
    clients = (RTCTestClient(limited.url), RTCTestClient(limited.url))
    for client in clients:
        await client.connect()
    yield clients
    for client in clients:
        await client.close()


def errors(client: RTCTestClient) -> list[dict]:
    return [m for m in client.messages if m.get("type") in ("error", "error-response")]


async def assert_still_serving(client: RTCTestClient, within: float = 10.0) -> None:
    msg_id = client.send_rtvi("client-message", {"t": "echo", "d": "ok"})
    reply = await client.wait_for(lambda m: m.get("id") == msg_id, within=within)
    assert reply["type"] == "server-response" and reply["data"]["d"] == "ok"


async def real_offer() -> str:
    client = RTCTestClient("http://127.0.0.1:9")
    try:
        await client.pc.setLocalDescription(await client.pc.createOffer())
        return client.pc.localDescription.sdp
    finally:
        await client.close()


@pytest.mark.e2e
async def test_sdp_size_and_shape(
    limited: ServerProcess, pair: tuple[RTCTestClient, RTCTestClient]
) -> None:
    sdp = await real_offer()
    assert len(sdp) < 8192  # the pair connected with offers like this one
    padded = sdp + "a=x-padding:" + "p" * (8192 - len(sdp)) + "\r\n"
    no_audio = sdp.replace("m=audio ", "m=video ")
    many = sdp + "".join(f"m=video {9 + i} UDP/TLS/RTP/SAVPF 96\r\n" for i in range(20))
    async with httpx.AsyncClient(base_url=limited.url, timeout=20) as http:
        before = len((await http.get("/api/sessions")).json()["sessions"])
        for bad, error in [
            (padded, "the SDP is too large"),
            (no_audio, "no audio m-line"),
            (many, "more than 16 media sections"),
            ("v=0\r\nm=audio 9 x\r\n\x00", "NUL"),
        ]:
            response = await http.post("/api/offer", json={"sdp": bad, "type": "offer"})
            assert response.status_code == 400, response.text
            assert error in response.json()["error"]
        assert len((await http.get("/api/sessions")).json()["sessions"]) == before
    for client in pair:
        await assert_still_serving(client)


@pytest.mark.e2e
async def test_candidates_per_patch_and_per_session(
    limited: ServerProcess, pair: tuple[RTCTestClient, RTCTestClient]
) -> None:
    victim, _ = pair
    end = {"candidate": "", "sdp_mid": "0", "sdp_mline_index": 0}
    async with httpx.AsyncClient(base_url=limited.url, timeout=20) as http:
        over = await http.patch("/api/offer", json={"pc_id": victim.pc_id, "candidates": [end] * 9})
        assert over.status_code == 413
        assert over.json()["error"] == "too many candidates: 9 (limit 8)"
        accepted = 0
        while True:
            body = {"pc_id": victim.pc_id, "candidates": [end] * 8}
            response = await http.patch("/api/offer", json=body)
            if response.status_code != 200:
                break
            accepted += 8
        assert response.status_code == 413
        assert "for one peer connection (limit 30)" in response.json()["error"]
        assert 8 <= accepted <= 30
    for client in pair:
        await assert_still_serving(client)


# -- data-channel limits ------------------------------------------------------------------------


@pytest.mark.e2e
async def test_message_size_limit(pair: tuple[RTCTestClient, RTCTestClient]) -> None:
    victim, bystander = pair
    victim.send_rtvi("client-message", {"t": "echo", "d": "x" * 1800})  # under 2048 bytes
    reply = await victim.wait_for(lambda m: m.get("type") == "server-response")
    assert len(reply["data"]["d"]) == 1800
    # Counted in bytes, not characters: 700 three-byte characters are 2100 bytes.
    big = {"label": "rtvi-ai", "type": "client-message", "id": "big", "data": {"d": "€" * 700}}
    victim.send_raw(json.dumps(big, ensure_ascii=False))  # about 800 characters
    refused = await victim.wait_for(lambda m: m.get("type") == "error")
    size = int(refused["data"]["error"].split("message too large: ")[1].split(" bytes")[0])
    assert size > 2100 and "(limit 2048)" in refused["data"]["error"]
    await assert_still_serving(victim)
    await assert_still_serving(bystander)
    assert errors(bystander) == []


@pytest.mark.e2e
async def test_message_flood_is_dropped_and_reported(
    pair: tuple[RTCTestClient, RTCTestClient],
) -> None:
    victim, bystander = pair
    await asyncio.sleep(2.1)  # let the bucket refill after the handshake
    for i in range(1000):
        victim.send_raw(json.dumps({"label": "rtvi-ai", "type": "client-message",
                                    "id": f"f{i}", "data": {"t": "echo", "d": i}}))  # fmt: skip
    # The neighbour is served while the flood goes on.
    await assert_still_serving(bystander)
    flood = await victim.wait_for(lambda m: m.get("type") == "error")
    assert "too many messages (5 per second, 10 at once)" in flood["data"]["error"]
    assert flood["data"]["fatal"] is False
    await asyncio.sleep(2.5)  # the bucket refills
    await assert_still_serving(victim)
    answered = [m for m in victim.messages if str(m.get("id", "")).startswith("f")]
    print(f"flood: {len(answered)} of 1000 messages served, the neighbour answered meanwhile")
    assert 1 <= len(answered) <= 40, "the burst and what refilled during the flood"
    assert 1 <= len(errors(victim)) <= 2, "reported every 2 s at most, not per message"
    assert errors(bystander) == []


@pytest.mark.e2e
async def test_send_text_length(pair: tuple[RTCTestClient, RTCTestClient]) -> None:
    victim, bystander = pair
    queued = {"run_immediately": False}  # adds a user message without running the LLM
    ok_id = victim.send_rtvi("send-text", {"content": "y" * 100, "options": queued})
    await assert_still_serving(victim)
    too_long = victim.send_rtvi("send-text", {"content": "y" * 101, "options": queued})
    reply = await victim.wait_for(lambda m: m.get("id") == too_long)
    assert reply["type"] == "error-response"
    assert reply["data"]["error"] == "send-text content too long: 101 characters (limit 100)"
    assert not [m for m in errors(victim) if m.get("id") == ok_id]
    info = (await victim.request("session-info"))["data"]["d"]
    assert info["conversation"]["transcript"] == [{"role": "user", "content": "y" * 100}]
    await assert_still_serving(bystander)


# -- session duration -----------------------------------------------------------------------------


async def listed(server: ServerProcess) -> list[str]:
    async with httpx.AsyncClient(base_url=server.url) as http:
        return [s["pc_id"] for s in (await http.get("/api/sessions")).json()["sessions"]]


async def wait_gone(server: ServerProcess, pc_id: str | None, within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while pc_id in await listed(server):
            await asyncio.sleep(0.1)


@pytest.mark.e2e
async def test_max_session_duration(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(max_session_seconds="3")
    first, second = RTCTestClient(server.url), RTCTestClient(server.url)
    try:
        await first.connect()
        await asyncio.sleep(1.5)
        await second.connect()
        told = await first.wait_for(lambda m: m.get("type") == "error", within=5)
        assert told["data"] == {
            "error": "the session reached its maximum duration (3 s)",
            "fatal": True,
        }
        left = await first.wait_for(lambda m: m.get("type") == "signalling")
        assert left["message"]["type"] == "peerLeft"
        await wait_gone(server, first.pc_id)
        assert second.pc_id in await listed(server)
        await assert_still_serving(second)
    finally:
        await first.close()
        await second.close()


# -- new sessions per address -----------------------------------------------------------------


@pytest.mark.e2e
async def test_new_sessions_per_address(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(session_rate_per_minute="6", session_burst="3")
    client = RTCTestClient(server.url)
    # Loopback is 127.0.0.0/8: a client bound to 127.0.0.2 is another address.
    elsewhere = httpx.AsyncClient(
        base_url=server.url, transport=httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    )
    try:
        http = client.http
        session_id = (await http.post("/start", json={})).json()["sessionId"]
        await client.connect(session_id=session_id)  # a /start's first offer is not counted
        for _ in range(2):
            assert (await http.post("/start", json={})).status_code == 200
        refused = await http.post("/start", json={})
        assert refused.status_code == 429
        assert refused.json() == {
            "error": "too many new sessions from this address (limit 6 per minute)",
            "detail": None,
        }
        assert 1 <= int(refused.headers["retry-after"]) <= 10
        offer = await http.post("/api/offer", json={"sdp": (await real_offer()), "type": "offer"})
        assert offer.status_code == 429, "a fresh offer is a new session too"
        # Renegotiating an existing session is not a new one.
        assert (await client.renegotiate())["pc_id"] == client.pc_id
        assert (await elsewhere.post("/start", json={})).status_code == 200
        await assert_still_serving(client)
    finally:
        await elsewhere.aclose()
        await client.close()
