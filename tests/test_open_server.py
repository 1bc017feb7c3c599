"""Safe defaults: the server binds loopback unless told otherwise, and an open server (no
API keys) reachable from the network says so at start and in ``/health``."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from server.guards.auth import exposure_warning, is_loopback
from server.settings import Settings
from testkit.server_process import ServerProcess


def test_the_default_bind_address_is_loopback() -> None:
    assert Settings().host == "127.0.0.1"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.53", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.0.0.5", False),
        ("parley.example", False),
    ],
)
def test_which_bind_addresses_are_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_only_an_open_server_on_the_network_is_warned_about() -> None:
    assert exposure_warning("127.0.0.1", keys=False) is None
    assert exposure_warning("0.0.0.0", keys=True) is None
    warning = exposure_warning("0.0.0.0", keys=False)
    assert warning is not None and "PARLEY_API_KEYS" in warning and "0.0.0.0" in warning


@pytest.mark.e2e
def test_an_open_server_bound_to_every_interface_warns_in_log_and_health(
    start_server: Callable[..., ServerProcess],
) -> None:
    # Bound to 0.0.0.0, reached through 127.0.0.1.
    server = start_server(host="0.0.0.0")
    health = httpx.get(f"{server.url}/health", timeout=5).json()
    assert health["open"] is True
    assert "PARLEY_API_KEYS" in health["warning"], health
    warnings = [line for line in server.log().splitlines() if "PARLEY_API_KEYS" in line]
    assert warnings and all("WARNING" in line for line in warnings), server.log()


@pytest.mark.e2e
def test_a_loopback_or_keyed_server_has_no_warning(
    start_server: Callable[..., ServerProcess],
) -> None:
    loopback = start_server()
    health = httpx.get(f"{loopback.url}/health", timeout=5).json()
    assert health["open"] is True and health["warning"] is None
    assert "PARLEY_API_KEYS" not in loopback.log()

    keyed = start_server(host="0.0.0.0", api_keys="k-test")
    auth = {"Authorization": "Bearer k-test"}  # with keys, the details need one
    health = httpx.get(f"{keyed.url}/health", headers=auth, timeout=5).json()
    assert health["open"] is False and health["warning"] is None
    assert "PARLEY_API_KEYS" not in keyed.log()
