"""HTTP signalling: offers, trickled candidates, /start sessions, renegotiation, bad input."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e

NO_AUDIO_SDP = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n"


@pytest.fixture
async def http(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        yield client


@pytest.fixture
async def healthy(server: ServerProcess) -> AsyncIterator[RTCTestClient]:
    """A connected session that every bad request must leave alone."""
    client = RTCTestClient(server.url)
    await client.connect()
    yield client
    reply = await client.request("echo", "still fine")
    assert reply["type"] == "server-response" and reply["data"]["d"] == "still fine"
    await client.close()


async def test_health_reports_version_uptime_and_sessions(http: httpx.AsyncClient) -> None:
    body = (await http.get("/health")).json()
    assert body["status"] == "ok"
    assert body["version"] == "0.1.0"
    assert body["uptime_seconds"] > 0
    assert isinstance(body["sessions_active"], int)


async def test_openapi_describes_every_route(http: httpx.AsyncClient) -> None:
    spec = (await http.get("/openapi.json")).json()
    paths = spec["paths"]
    assert set(paths["/api/offer"]) == {"post", "patch"}
    assert set(paths["/sessions/{session_id}/api/offer"]) == {"post", "patch"}
    assert "post" in paths["/start"]
    assert {"get", "delete"} <= set(paths["/api/sessions/{pc_id}"])
    assert "get" in paths["/api/sessions"] and "get" in paths["/health"]
    offer = paths["/api/offer"]["post"]
    assert offer["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "OfferRequest"
    )
    assert "503" in offer["responses"] and "400" in offer["responses"]
    assert (await http.get("/docs")).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "content", "status", "error"),
    [
        ("POST", "/api/offer", b"{not json", 400, "not valid JSON"),
        ("POST", "/api/offer", b"[1, 2]", 422, "expected fields"),
        ("POST", "/api/offer", b'{"type": "offer"}', 422, "expected fields"),
        ("POST", "/api/offer", b'{"sdp": 5, "type": "offer"}', 422, "expected fields"),
        ("POST", "/api/offer", b'{"sdp": "v=0", "type": "answer"}', 422, "expected fields"),
        ("POST", "/api/offer", b'{"sdp": "hello", "type": "offer"}', 400, "v=0"),
        ("POST", "/api/offer", b'{"sdp": "v=0\\r\\nm=audio garbage", "type": "offer"}', 400, ""),
        ("PATCH", "/api/offer", b'{"pc_id": "nope", "candidates": []}', 404, "unknown pc_id"),
        ("PATCH", "/api/offer", b'{"candidates": []}', 422, "expected fields"),
        ("POST", "/sessions/nope/api/offer", b'{"sdp": "v=0\\nm=audio 9 x", "type": "offer"}',
         404, "unknown session id"),
        ("GET", "/api/sessions/nope", b"", 404, "unknown pc_id"),
        ("DELETE", "/api/sessions/nope", b"", 404, "unknown pc_id"),
    ],
)  # fmt: skip
async def test_bad_requests_get_a_json_error(
    http: httpx.AsyncClient,
    healthy: RTCTestClient,
    method: str,
    path: str,
    content: bytes,
    status: int,
    error: str,
) -> None:
    headers = {"content-type": "application/json"}
    response = await http.request(method, path, content=content, headers=headers)
    assert response.status_code == status, response.text
    body = response.json()
    assert error in body["error"]


async def test_sdp_without_audio_is_refused(http: httpx.AsyncClient) -> None:
    response = await http.post("/api/offer", json={"sdp": NO_AUDIO_SDP, "type": "offer"})
    assert response.status_code == 400
    assert response.json()["error"] == "the SDP offer has no audio m-line"


async def test_garbage_sdp_leaves_no_session(http: httpx.AsyncClient) -> None:
    before = (await http.get("/health")).json()["sessions_active"]
    sdp = "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 opus/48000/2\r\n@@@\r\n"
    response = await http.post("/api/offer", json={"sdp": sdp, "type": "offer"})
    assert response.status_code == 400
    assert "could not be applied" in response.json()["error"]
    assert (await http.get("/health")).json()["sessions_active"] == before


async def test_oversized_body_is_413(http: httpx.AsyncClient, healthy: RTCTestClient) -> None:
    body = b'{"sdp": "' + b"a" * 70_000 + b'", "type": "offer"}'
    response = await http.post("/api/offer", content=body)
    assert response.status_code == 413
    assert "larger than 65536" in response.json()["error"]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it streams
        for _ in range(20):
            yield b"x" * 8192

    streamed = await http.post("/api/offer", content=chunks())
    assert streamed.status_code == 413


async def test_bad_candidate_is_400(http: httpx.AsyncClient, healthy: RTCTestClient) -> None:
    body = {"pc_id": healthy.pc_id, "candidates": [{"candidate": "candidate:1 2", "sdp_mid": "0"}]}
    response = await http.patch("/api/offer", json=body)
    assert response.status_code == 400
    assert "invalid ICE candidate" in response.json()["error"]


async def test_start_then_session_offer(server: ServerProcess, http: httpx.AsyncClient) -> None:
    started = await http.post(
        "/start", json={"transport": "webrtc", "requestData": {"room": "blue"}}
    )
    assert started.status_code == 200
    session_id = started.json()["sessionId"]
    assert started.json()["iceConfig"] == {"iceServers": []}

    client = RTCTestClient(server.url)
    try:
        await client.connect(session_id=session_id)
        info = (await http.get(f"/api/sessions/{client.pc_id}")).json()
        assert info["session_id"] == session_id
        assert info["state"] == "connected"
        assert info["request_data"] == {"room": "blue"}
        # PATCH through another session's path is refused.
        other = (await http.post("/start", json={})).json()["sessionId"]
        wrong = await http.patch(
            f"/sessions/{other}/api/offer", json={"pc_id": client.pc_id, "candidates": []}
        )
        assert wrong.status_code == 404
    finally:
        await client.close()


async def test_start_takes_a_bare_body_as_request_data(
    server: ServerProcess, http: httpx.AsyncClient
) -> None:
    """The official client posts its requestData as the whole /start body."""
    session_id = (await http.post("/start", json={"harness": True})).json()["sessionId"]
    client = RTCTestClient(server.url)
    try:
        await client.connect(session_id=session_id)
        info = (await http.get(f"/api/sessions/{client.pc_id}")).json()
        assert info["request_data"] == {"harness": True}
    finally:
        await client.close()


async def test_start_returns_configured_ice_servers(start_server) -> None:
    ice = '[{"urls": ["turn:turn.example.test:3478"], "username": "u", "credential": "p"}]'
    server = start_server(ice_servers=ice)
    async with httpx.AsyncClient(base_url=server.url) as http:
        body = (await http.post("/start", json={"enableDefaultIceServers": True})).json()
    assert body["iceConfig"]["iceServers"] == [
        {"urls": ["turn:turn.example.test:3478"], "username": "u", "credential": "p"}
    ]


async def test_renegotiation_keeps_the_peer_connection(
    server: ServerProcess, http: httpx.AsyncClient
) -> None:
    async with RTCTestClient(server.url) as client:
        pc_id = client.pc_id
        created = (await http.get(f"/api/sessions/{pc_id}")).json()["created_at"]
        answer = await client.renegotiate()
        assert answer["pc_id"] == pc_id
        info = (await http.get(f"/api/sessions/{pc_id}")).json()
        assert info["created_at"] == created, "renegotiation must not replace the session"
        reply = await client.request("echo", 42)
        assert reply["data"]["d"] == 42


async def test_restart_pc_replaces_the_peer_connection(
    server: ServerProcess, http: httpx.AsyncClient
) -> None:
    first = RTCTestClient(server.url)
    second = RTCTestClient(server.url)
    try:
        await first.connect()
        pc_id = first.pc_id
        created = (await http.get(f"/api/sessions/{pc_id}")).json()["created_at"]
        # A fresh peer connection takes over the same pc_id.
        second.pc_id = pc_id
        await second.pc.setLocalDescription(await second.pc.createOffer())
        answer = await second.post_offer(second.pc.localDescription.sdp, restart_pc=True)
        assert answer["pc_id"] == pc_id
        info = (await http.get(f"/api/sessions/{pc_id}")).json()
        assert info["created_at"] != created
        sessions = (await http.get("/api/sessions")).json()["sessions"]
        assert [s["pc_id"] for s in sessions].count(pc_id) == 1
        left = await first.wait_for(lambda m: m.get("type") == "signalling")
        assert left["message"]["type"] == "peerLeft"
    finally:
        await first.close()
        await second.close()
