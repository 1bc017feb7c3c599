"""Hostile signalling (issue 22, items 4-6): one client, one network or one key cannot take
every slot or every /start id; a connection that never completes ICE is closed; the
candidates of offers count toward the peer connection's budget and never reach refused
ranges; renegotiations are rate limited; the media-section limit holds whatever ends the
lines. Every refusal says why, and the session beside keeps working.

Test clients all come from 127.0.0.1; a client bound to another 127.x address is another
address (127.0.N.x: another /24 network). Only UDP sockets this test binds on 127.0.0.1
are ever named in candidates, so no traffic leaves loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from testkit.rtc_client import RTCTestClient, split_candidates
from testkit.server_process import ServerProcess
from testkit.udp_targets import Target, targets, with_candidates

pytestmark = pytest.mark.e2e

# -- helpers -------------------------------------------------------------------------------------


def http_from(url: str, address: str, key: str | None = None) -> httpx.AsyncClient:
    """An HTTP client whose requests come from ``address`` (a 127.x address)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(base_url=url, transport=transport, timeout=20, headers=headers)


async def bare_offer() -> str:
    """A real aiortc offer without candidates: answered, it never completes ICE."""
    client = RTCTestClient("http://127.0.0.1:9")
    try:
        await client.pc.setLocalDescription(await client.pc.createOffer())
        return split_candidates(client.pc.localDescription.sdp)[0]
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def client_from(
    url: str, address: str, key: str | None = None, session_id: str | None = None
) -> AsyncIterator[RTCTestClient]:
    """A connected aiortc client whose signalling comes from ``address``."""
    client = RTCTestClient(url)
    await client.http.aclose()
    client.http = http_from(url, address, key)
    try:
        await client.connect(session_id=session_id)
        yield client
    finally:
        await client.close()


async def assert_serving(client: RTCTestClient) -> None:
    reply = await client.request("echo", "still here")
    assert reply["type"] == "server-response" and reply["data"]["d"] == "still here"


def assert_refused(response: httpx.Response, status: int, error: str) -> None:
    assert response.status_code == status, response.text
    assert error in response.json()["error"], response.json()
    if status == 429:
        assert int(response.headers["retry-after"]) >= 1


async def post_offer(
    http: httpx.AsyncClient, sdp: str, pc_id: str | None = None, path: str = "/api/offer"
) -> httpx.Response:
    return await http.post(path, json={"sdp": sdp, "type": "offer", "pc_id": pc_id})


def reached(group: list[tuple[int, Target]]) -> int:
    return sum(target.datagrams > 0 for _, target in group)


# -- item 4: per-address, per-network and per-key caps, the connect deadline ----------------------


@pytest.fixture(scope="module")
def capped(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server(
        max_sessions="8",
        max_sessions_per_address="2",
        max_sessions_per_network="6",
        max_pending_per_address="2",
        max_pending_per_network="4",
        connect_timeout="60",
        liveness_timeout="60",
    )


async def test_rotating_addresses_of_one_network_cannot_take_every_slot(
    capped: ServerProcess,
) -> None:
    sdp = await bare_offer()
    attackers = [http_from(capped.url, f"127.0.0.{i}") for i in range(2, 12)]
    try:
        answers = [await post_offer(http, sdp) for http in attackers * 2]
        accepted = [r for r in answers if r.status_code == 200]
        assert len(accepted) == 4, "the network's cap on sessions still connecting"
        refused = [r for r in answers if r.status_code != 200]
        for response in refused:
            assert_refused(response, 429, "connecting or waiting for an offer from this network")
        async with client_from(capped.url, "127.0.1.1") as legit:  # another network
            await assert_serving(legit)
    finally:
        for http in attackers:
            await http.aclose()


async def test_one_network_cannot_take_every_start_id(capped: ServerProcess) -> None:
    attackers = [http_from(capped.url, f"127.0.2.{i}") for i in range(2, 12)]
    try:
        codes = [(await http.post("/start", json={})).status_code for http in attackers * 4]
        assert codes.count(200) == 4 and codes.count(429) == 36, codes
        refused = await attackers[0].post("/start", json={})
        assert_refused(refused, 429, "connecting or waiting for an offer from this network")
        async with http_from(capped.url, "127.0.3.1") as legit:
            start = await legit.post("/start", json={})
        assert start.status_code == 200, start.text
        session_id = start.json()["sessionId"]
        async with client_from(capped.url, "127.0.3.1", session_id=session_id) as client:
            await assert_serving(client)
    finally:
        for http in attackers:
            await http.aclose()


async def test_one_address_holds_at_most_its_sessions(capped: ServerProcess) -> None:
    async with (
        client_from(capped.url, "127.0.4.1") as first,
        client_from(capped.url, "127.0.4.1") as second,
        http_from(capped.url, "127.0.4.1") as http,
    ):
        third = await post_offer(http, await bare_offer())
        assert_refused(third, 429, "too many sessions from this address (limit 2)")
        await assert_serving(first)
        await assert_serving(second)


async def test_one_key_cannot_take_every_slot(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(api_keys="key-a,key-b", max_sessions="4", liveness_timeout="60")
    sdp = await bare_offer()
    async with http_from(server.url, "127.0.0.1", "key-a") as flood:
        codes = [(await post_offer(flood, sdp)).status_code for _ in range(5)]
        assert codes == [200, 200, 429, 429, 429], "a key's share: half of 4 slots"
        assert_refused(await post_offer(flood, sdp), 429, "sessions for this API key (limit 2)")
        starts = [(await flood.post("/start", json={})).status_code for _ in range(10)]
        assert starts == [200] * 8 + [429] * 2, "half of the 16 /start ids"
    async with http_from(server.url, "127.0.0.1", "key-b") as other:
        start = await other.post("/start", json={})
    assert start.status_code == 200, start.text
    session_id = start.json()["sessionId"]
    async with client_from(server.url, "127.0.0.1", "key-b", session_id) as client:
        await assert_serving(client)


@pytest.fixture(scope="module")
def strict(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server(
        connect_timeout="8",
        liveness_timeout="60",
        max_session_candidates="20",
        renegotiations_per_minute="1",  # no token comes back during a test
        renegotiation_burst="3",
    )


async def test_a_connection_that_never_completes_ice_is_closed(strict: ServerProcess) -> None:
    async with (
        client_from(strict.url, "127.0.0.1") as bystander,
        http_from(strict.url, "127.0.0.1") as http,
    ):
        answer = await post_offer(http, await bare_offer())
        pc_id = answer.json()["pc_id"]
        keep_alive = {"pc_id": pc_id, "candidates": []}  # each PATCH is a sign of life
        deadline = time.monotonic() + 40
        while (await http.patch("/api/offer", json=keep_alive)).status_code == 200:
            assert time.monotonic() < deadline, "still there long after connect_timeout (8 s)"
            await asyncio.sleep(0.5)
        sessions = (await http.get("/api/sessions")).json()["sessions"]
        assert pc_id not in [s["pc_id"] for s in sessions]
        await assert_serving(bystander)
    assert "not connected 8 s after its answer" in strict.log()


# -- item 5: candidates ------------------------------------------------------------------------


async def test_offer_candidates_count_toward_the_peer_connections_budget(
    strict: ServerProcess,
) -> None:
    sdp = await bare_offer()
    async with targets(26) as group, http_from(strict.url, "127.0.0.1") as http:
        ports = [port for port, _ in group]
        before = len((await http.get("/api/sessions")).json()["sessions"])
        over = await post_offer(http, with_candidates(sdp, ports[:21]))
        assert_refused(over, 413, "too many candidates for one peer connection (limit 20)")
        assert len((await http.get("/api/sessions")).json()["sessions"]) == before
        answer = await post_offer(http, with_candidates(sdp, ports[:15]))
        assert answer.status_code == 200, answer.text
        pc_id = answer.json()["pc_id"]
        # A renegotiation repeating its 15 candidates and naming 10 more: 25 > 20.
        more = await post_offer(http, with_candidates(sdp, ports[:25]), pc_id)
        assert_refused(more, 413, "too many candidates for one peer connection (limit 20)")
        # Repeated candidates are not counted again: 15 + 5 fit.
        fits = await post_offer(http, with_candidates(sdp, ports[:20]), pc_id)
        assert fits.status_code == 200, fits.text
        end = {"pc_id": pc_id, "candidates": [{"candidate": "", "sdp_mid": "0"}]}
        assert_refused(await http.patch("/api/offer", json=end), 413, "(limit 20)")
        async with asyncio.timeout(30):  # the server's checks reach the candidates it took
            while not reached(group[:20]):
                await asyncio.sleep(0.2)
        await asyncio.sleep(2)
        assert reached(group[20:]) == 0, "none toward the candidates refused"


async def test_renegotiations_are_rate_limited(strict: ServerProcess) -> None:
    sdp = await bare_offer()
    async with (
        client_from(strict.url, "127.0.0.1") as bystander,
        http_from(strict.url, "127.0.0.1") as http,
    ):
        pc_id = (await post_offer(http, sdp)).json()["pc_id"]
        codes = [(await post_offer(http, sdp, pc_id)).status_code for _ in range(3)]
        assert codes == [200, 200, 200], "the burst"
        refused = await post_offer(http, sdp, pc_id)
        assert_refused(refused, 429, "too many renegotiations of this peer connection")
        assert "(limit 1 per minute)" in refused.json()["error"]
        await assert_serving(bystander)


async def test_refused_ranges_get_no_traffic(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(allow_private_candidates="false")
    sdp = await bare_offer()
    async with targets(12) as group, http_from(server.url, "127.0.0.1") as http:
        ports = [port for port, _ in group]
        answer = await post_offer(http, with_candidates(sdp, ports[:10]))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["candidates_dropped"] == 10
        assert body["detail"].startswith("10 candidates dropped: 10 toward loopback")
        trickled = [
            {"candidate": f"candidate:9 1 udp 1 {host} {port} typ host", "sdp_mid": "0"}
            for host, port in [("127.0.0.1", ports[10]), ("::1", ports[11])]
        ]
        patch = await http.patch(
            "/api/offer", json={"pc_id": body["pc_id"], "candidates": trickled}
        )
        assert patch.status_code == 200, patch.text
        assert patch.json()["candidates_dropped"] == 2
        await asyncio.sleep(3)
        ufrag = next(x for x in sdp.splitlines() if x.startswith("a=ice-ufrag:")).split(":")[1]
        assert sum(target.checks_for(ufrag) for _, target in group) == 0
    # A real client still connects: its candidates (private addresses of this machine) are
    # dropped too, but its checks reach ours and the server learns its address from them.
    async with client_from(server.url, "127.0.0.1") as client:
        await assert_serving(client)


# -- item 6: media sections, whatever ends the lines ----------------------------------------------


def many_sections(sdp: str, count: int, separator: str) -> str:
    """``sdp`` plus ``count`` bundled audio sections whose lines end with ``separator``."""
    lines = sdp.splitlines()
    kinds = ("a=ice-ufrag", "a=ice-pwd", "a=fingerprint", "a=setup")
    copied = [next(line for line in lines if line.startswith(k)) for k in kinds]
    mids = [f"x{n}" for n in range(count)]
    lines = [f"{x} {' '.join(mids)}" if x.startswith("a=group:BUNDLE") else x for x in lines]
    head = ["m=audio 9 UDP/TLS/RTP/SAVPF 111", "c=IN IP4 0.0.0.0"]
    tail = [*copied, "a=rtcp-mux", "a=rtpmap:111 opus/48000/2", "a=sendrecv"]
    extra = "".join(separator.join([*head, f"a=mid:{m}", *tail]) + separator for m in mids)
    return "\r\n".join(lines) + "\r\n" + extra


@pytest.mark.parametrize("separator", ["\r", "\x85", "\u2028", "\x0b"])
async def test_media_sections_are_counted_whatever_ends_the_lines(
    capped: ServerProcess, separator: str
) -> None:
    async with http_from(capped.url, "127.0.5.1") as http:
        response = await post_offer(http, many_sections(await bare_offer(), 20, separator))
        assert_refused(response, 400, f"ends a line with U+{ord(separator):04X}")
        assert "only CRLF or LF" in response.json()["error"]


async def test_lf_only_offers_still_work(capped: ServerProcess) -> None:
    async with http_from(capped.url, "127.0.6.1") as http:
        sdp = (await bare_offer()).replace("\r\n", "\n")
        response = await post_offer(http, sdp)
        assert response.status_code == 200, response.text
        over = await post_offer(http, many_sections(sdp, 20, "\n"))
        assert_refused(over, 400, "more than 16 media sections")
        await http.delete(f"/api/sessions/{response.json()['pc_id']}")
