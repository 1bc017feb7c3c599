"""The Host check (DNS rebinding): a request naming a host the server does not answer to is
refused with 400 and a reason, whatever the route (server/api/host_check.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from server.api.app import create_app
from server.api.host_check import allowed_hosts, host_name, matches
from server.settings import Settings
from testkit.server_process import ServerProcess

REBIND = "rebind.attacker.example"


def _settings(**values: object) -> Settings:
    return Settings(
        stt="openai", llm="openai", tts="openai", openai_base_url="http://127.0.0.1:9",
        preload_models=False, greeting="", **values,
    )  # fmt: skip


@pytest.fixture
def loopback() -> Iterator[TestClient]:
    with TestClient(create_app(_settings())) as http:
        yield http


def test_host_names_are_read_without_port_case_or_trailing_dot() -> None:
    assert host_name("App.Example.COM.:7860") == "app.example.com"
    assert host_name("[::1]:7860") == "::1"
    assert host_name("localhost") == "localhost"
    assert matches("a.b.example.com", "*.example.com")
    assert matches("b.example.com", ".example.com")
    assert not matches("example.com", "*.example.com")
    assert not matches("evilexample.com", "*.example.com")


def test_the_default_depends_on_the_bound_address() -> None:
    assert allowed_hosts([], "0.0.0.0") == ["*"]
    assert "*" not in allowed_hosts([], "127.0.0.1")
    assert allowed_hosts([], "127.0.0.1", proxied=True) == ["*"]  # the proxy sees the names
    assert allowed_hosts(["app.example.com"], "127.0.0.1") == ["app.example.com"]
    assert Settings(allowed_hosts="App.Example.com., *.corp.example").allowed_hosts == [
        "app.example.com", "*.corp.example",
    ]  # fmt: skip


def test_a_rebinding_host_cannot_read_the_history_of_an_open_loopback_server(
    loopback: TestClient,
) -> None:
    refused = loopback.get("/api/history", headers={"Host": f"{REBIND}:7860"})
    assert refused.status_code == 400
    body = refused.json()
    assert body["error"] == "this server does not answer to that host name"
    assert REBIND in body["detail"] and "PARLEY_ALLOWED_HOSTS" in body["detail"]
    for other in ("/health", "/", "/api/sessions"):  # every route, not only the API
        assert loopback.get(other, headers={"Host": REBIND}).status_code == 400


LOCAL = ["localhost:7860", "LOCALHOST", "127.0.0.1:7860", "[::1]:7860", "app.localhost",
         "testserver", "10.1.2.3:7860"]  # fmt: skip


@pytest.mark.parametrize("host", LOCAL)
def test_local_names_and_addresses_are_answered_on_loopback(
    loopback: TestClient, host: str
) -> None:
    assert loopback.get("/api/history", headers={"Host": host}).status_code == 200


def test_a_listed_host_is_answered_and_others_refused() -> None:
    settings = _settings(host="0.0.0.0", allowed_hosts=["app.example.com", "*.corp.example"])
    with TestClient(create_app(settings)) as http:
        for host in ("app.example.com", "APP.example.com:443", "x.corp.example", "10.0.0.7"):
            assert http.get("/health", headers={"Host": host}).status_code == 200, host
        for host in ("localhost", REBIND, "corp.example"):
            assert http.get("/health", headers={"Host": host}).status_code == 400, host


def test_any_host_when_bound_to_every_interface_without_a_list() -> None:
    with TestClient(create_app(_settings(host="0.0.0.0"))) as http:
        assert http.get("/health", headers={"Host": REBIND}).status_code == 200


@pytest.mark.e2e
def test_a_real_server_refuses_the_rebinding_host(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server()
    refused = httpx.get(f"{server.url}/api/history", headers={"Host": REBIND}, timeout=5)
    assert refused.status_code == 400 and refused.json()["error"]
    local = httpx.get(f"{server.url}/api/history", headers={"Host": "localhost"}, timeout=5)
    assert local.status_code == 200
    assert "ERROR" not in server.log()
