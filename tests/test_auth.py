"""API keys, session ownership and CORS, against a real server."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from pydantic import ValidationError

from server.guards import auth
from server.settings import Settings
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

ALPHA, BETA = "alpha-key-0123456789", "beta-key-9876543210"
ORIGIN = "https://app.example.test"

# Every route that needs a key: (method, path, JSON body).
PROTECTED_ROUTES = [
    ("POST", "/api/offer", {"sdp": "v=0\r\nm=audio 9 x\r\n", "type": "offer"}),
    ("PATCH", "/api/offer", {"pc_id": "x", "candidates": []}),
    ("POST", "/start", {}),
    ("POST", "/sessions/x/api/offer", {"sdp": "v=0\r\nm=audio 9 x\r\n", "type": "offer"}),
    ("PATCH", "/sessions/x/api/offer", {"pc_id": "x", "candidates": []}),
    ("GET", "/api/sessions", None),
    ("GET", "/api/sessions/x", None),
    ("DELETE", "/api/sessions/x", None),
    ("POST", "/api/sessions/x/server-message", {"data": 1}),
    ("GET", "/api/sessions/x/transcript", None),
    ("GET", "/api/history", None),
    ("GET", "/metrics", None),
]


@pytest.fixture(scope="module")
def keyed(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """Two keys (comma-separated, as an operator would type them) and one CORS origin."""
    return start_server(api_keys=f"{ALPHA}, {BETA}", cors_origins=ORIGIN)


@pytest.fixture
async def http(keyed: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=keyed.url, timeout=20) as client:
        yield client


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def keyed_client(server: ServerProcess, key: str) -> RTCTestClient:
    client = RTCTestClient(server.url)
    client.http.headers.update(bearer(key))
    return client


@pytest.mark.e2e
@pytest.mark.parametrize(("method", "path", "body"), PROTECTED_ROUTES)
@pytest.mark.parametrize(
    "headers",
    [{}, bearer("wrong-key"), bearer(ALPHA[:-1]), {"Authorization": f"Basic {ALPHA}"},
     {"Authorization": "Bearer"}, {"X-API-Key": ALPHA}],
    ids=["none", "wrong", "prefix", "basic", "empty", "other-header"],
)  # fmt: skip
async def test_protected_routes_need_a_valid_key(
    http: httpx.AsyncClient, method: str, path: str, body: object, headers: dict[str, str]
) -> None:
    response = await http.request(method, path, json=body, headers=headers)
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"
    assert "API key" in response.json()["error"]


@pytest.mark.e2e
async def test_health_and_docs_stay_open(http: httpx.AsyncClient) -> None:
    assert (await http.get("/health")).status_code == 200
    spec = (await http.get("/openapi.json")).json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "401" in spec["paths"]["/api/offer"]["post"]["responses"]


@pytest.mark.e2e
async def test_each_key_works(http: httpx.AsyncClient) -> None:
    for key in (ALPHA, BETA):
        response = await http.post("/start", json={}, headers=bearer(key))
        assert response.status_code == 200
        assert (await http.get("/api/sessions", headers=bearer(key))).status_code == 200


@pytest.mark.e2e
async def test_another_key_cannot_touch_a_session(
    keyed: ServerProcess, http: httpx.AsyncClient
) -> None:
    owner = keyed_client(keyed, ALPHA)
    intruder = keyed_client(keyed, BETA)
    try:
        await owner.connect()
        pc_id = owner.pc_id
        mine = (await http.get(f"/api/sessions/{pc_id}", headers=bearer(ALPHA))).json()

        # Reading, trickling, hanging up: as if the session did not exist.
        for method, path, body in [
            ("GET", f"/api/sessions/{pc_id}", None),
            ("DELETE", f"/api/sessions/{pc_id}", None),
            ("PATCH", "/api/offer", {"pc_id": pc_id, "candidates": [{"candidate": ""}]}),
        ]:
            response = await http.request(method, path, json=body, headers=bearer(BETA))
            assert response.status_code == 404, (method, path, response.text)
            assert response.json()["error"] == f"unknown pc_id {pc_id!r}"
        listed = (await http.get("/api/sessions", headers=bearer(BETA))).json()["sessions"]
        assert pc_id not in [s["pc_id"] for s in listed]

        # Renegotiating or restarting under that pc_id makes the intruder its own session.
        await intruder.pc.setLocalDescription(await intruder.pc.createOffer())
        intruder.pc_id = pc_id
        answer = await intruder.post_offer(intruder.pc.localDescription.sdp, restart_pc=True)
        assert answer["pc_id"] != pc_id
        intruder.pc_id = pc_id
        answer = await intruder.post_offer(intruder.pc.localDescription.sdp)
        assert answer["pc_id"] != pc_id

        after = (await http.get(f"/api/sessions/{pc_id}", headers=bearer(ALPHA))).json()
        assert after["created_at"] == mine["created_at"]
        assert (await owner.request("echo", "mine"))["data"]["d"] == "mine"
        assert not [m for m in owner.messages if m.get("type") == "signalling"]

        deleted = await http.delete(f"/api/sessions/{pc_id}", headers=bearer(ALPHA))
        assert deleted.status_code == 200
    finally:
        await owner.close()
        await intruder.close()


@pytest.mark.e2e
async def test_transcripts_and_history_belong_to_their_key(
    keyed: ServerProcess, http: httpx.AsyncClient
) -> None:
    owner = keyed_client(keyed, ALPHA)
    try:
        await owner.connect()
        pc_id = owner.pc_id
        path = f"/api/sessions/{pc_id}/transcript"
        assert (await http.get(path, headers=bearer(ALPHA))).json()["id"] == pc_id
        assert (await http.get(path, headers=bearer(BETA))).status_code == 404
        posted = await http.post(
            f"/api/sessions/{pc_id}/server-message", json={"data": 1}, headers=bearer(BETA)
        )
        assert posted.status_code == 404
        for key, present in ((ALPHA, True), (BETA, False)):
            listed = (await http.get("/api/history", headers=bearer(key))).json()["sessions"]
            assert (pc_id in [s["id"] for s in listed]) is present
    finally:
        await owner.close()


@pytest.mark.e2e
async def test_a_start_session_id_belongs_to_its_key(
    keyed: ServerProcess, http: httpx.AsyncClient
) -> None:
    session_id = (await http.post("/start", json={}, headers=bearer(ALPHA))).json()["sessionId"]
    intruder = keyed_client(keyed, BETA)
    owner = keyed_client(keyed, ALPHA)
    try:
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await intruder.connect(session_id=session_id)
        assert refused.value.response.status_code == 404
        assert "unknown session id" in refused.value.response.json()["error"]
        await owner.connect(session_id=session_id)
        info = (await http.get(f"/api/sessions/{owner.pc_id}", headers=bearer(ALPHA))).json()
        assert info["session_id"] == session_id
    finally:
        await intruder.close()
        await owner.close()


@pytest.mark.e2e
async def test_a_made_up_pc_id_is_never_adopted(keyed: ServerProcess) -> None:
    """Ids are the server's (128 random bits), even when a restart names one."""
    client = keyed_client(keyed, ALPHA)
    try:
        await client.pc.setLocalDescription(await client.pc.createOffer())
        client.pc_id = "chosen-by-the-client"
        answer = await client.post_offer(client.pc.localDescription.sdp, restart_pc=True)
        assert answer["pc_id"] != "chosen-by-the-client"
        assert len(answer["pc_id"]) == 22  # secrets.token_urlsafe(16)
        deleted = await client.http.delete(f"/api/sessions/{answer['pc_id']}")
        assert deleted.status_code == 200
    finally:
        await client.close()


def test_every_key_is_compared_whichever_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    """No early exit: the work (and so the time) does not depend on which key matched."""
    calls: list[int] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(len(a) + len(b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    keys = auth.ApiKeys(["first", "second-key", "a-much-longer-third-key"])
    results = {}
    for token in ("first", "a-much-longer-third-key", "nope", "x" * 500):
        calls.clear()
        results[token] = keys.credential(token)
        assert calls == [64, 64, 64], "every key, always, on equal-length digests"
    assert results["first"] is not None and results["a-much-longer-third-key"] is not None
    assert results["first"] != results["a-much-longer-third-key"]
    assert results["nope"] is None and results["x" * 500] is None
    assert "first" not in results["first"], "a credential names a key without revealing it"
    assert not auth.ApiKeys([]).enabled


@pytest.mark.e2e
async def test_cors_preflight_and_errors_carry_the_allowed_origin(
    http: httpx.AsyncClient,
) -> None:
    preflight = await http.options(
        "/api/offer",
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    # The browser must be able to read a 401 too.
    refused = await http.post("/start", json={}, headers={"Origin": ORIGIN})
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == ORIGIN

    other = await http.options(
        "/api/offer",
        headers={"Origin": "https://evil.example.test", "Access-Control-Request-Method": "POST"},
    )
    assert other.status_code == 400
    assert "access-control-allow-origin" not in other.headers
    simple = await http.get("/health", headers={"Origin": "https://evil.example.test"})
    assert "access-control-allow-origin" not in simple.headers


@pytest.mark.e2e
async def test_without_settings_the_server_is_open_and_same_origin(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.url) as http:
        response = await http.post("/start", json={}, headers={"Origin": ORIGIN})
        assert response.status_code == 200
        assert "access-control-allow-origin" not in response.headers
        preflight = await http.options(
            "/api/offer", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
        )
        assert "access-control-allow-origin" not in preflight.headers


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", []), ("k1", ["k1"]), (" k1 , k2,", ["k1", "k2"]), ('["k1", "k,2"]', ["k1", "k,2"])],
)
def test_keys_and_origins_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: list[str]
) -> None:
    monkeypatch.setenv("PARLEY_API_KEYS", value)
    monkeypatch.setenv("PARLEY_CORS_ORIGINS", value.replace("k", "o"))
    settings = Settings()
    assert [k.get_secret_value() for k in settings.api_keys] == expected
    assert settings.cors_origins == [e.replace("k", "o") for e in expected]
    assert "k1" not in repr(settings), "keys stay out of logs and reprs"


def test_malformed_key_list_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_API_KEYS", '["unterminated')
    with pytest.raises(ValidationError, match="api_keys"):
        Settings()
