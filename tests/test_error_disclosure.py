"""What a model endpoint says when it fails is logged in full, but the client's RTVI
``error`` only names the service and the HTTP status: an upstream error body or a
connection detail (keys, internal addresses, account data) never reaches the client."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import openai
import pytest
from loguru import logger

from pipeline.services.errors import map_error
from pipeline.services.retry import RetryPolicy
from testkit.openai_stub import Fault, OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

SECRET = "sk-live-9f8e7d6c5b4a SECRET_TOKEN at http://10.20.30.40:8000/internal"


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="DEBUG", format="{level} {message}")
    yield lines
    logger.remove(sink)


def status_error(status: int, message: str) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://10.20.30.40:8000/v1/chat/completions")
    body = {"error": {"message": message, "type": "server_error"}}
    response = httpx.Response(status, json=body, request=request)
    return openai.APIStatusError(f"Error code: {status} - {body}", response=response, body=body)


@pytest.mark.parametrize("status", [500, 503, 400, 404, 401, 403, 429])
def test_an_upstream_error_body_is_logged_not_shown(status: int, log_lines: list[str]) -> None:
    error = map_error(status_error(status, SECRET), "llm")
    assert f"HTTP {status}" in str(error)
    for part in ("sk-live", "SECRET_TOKEN", "10.20.30.40"):
        assert part not in str(error), str(error)
    assert any(SECRET in line and line.startswith("WARNING") for line in log_lines), log_lines


def test_connection_details_are_logged_not_shown(log_lines: list[str]) -> None:
    request = httpx.Request("POST", "http://10.20.30.40:8000/v1/chat/completions")
    cause = httpx.ConnectError("[Errno 111] Connect call failed ('10.20.30.40', 8000)")
    try:
        raise openai.APIConnectionError(request=request) from cause
    except openai.APIConnectionError as exc:
        error = map_error(exc, "llm")
    assert "could not be reached" in str(error)
    assert "10.20.30.40" not in str(error), str(error)
    assert any("10.20.30.40" in line for line in log_lines), log_lines


def test_an_error_event_inside_a_stream_is_logged_not_shown(log_lines: list[str]) -> None:
    request = httpx.Request("POST", "http://10.20.30.40:8000/v1/chat/completions")
    exc = openai.APIError(SECRET, request, body=None)
    error = map_error(exc, "llm")
    assert "SECRET_TOKEN" not in str(error) and "reported an error" in str(error)
    assert any(SECRET in line for line in log_lines)


def test_an_unclassified_failure_is_logged_not_shown(log_lines: list[str]) -> None:
    error = map_error(RuntimeError(SECRET), "tts")
    assert "SECRET_TOKEN" not in str(error) and "RuntimeError" in str(error)
    assert any(SECRET in line for line in log_lines)


async def test_retries_log_each_failure_once(log_lines: list[str]) -> None:
    calls = 0

    async def failing() -> None:
        nonlocal calls
        calls += 1
        raise status_error(503, SECRET)

    with pytest.raises(Exception) as caught:
        await RetryPolicy(retries=1, base_delay=0).call(failing, "stt")
    assert calls == 2 and "SECRET_TOKEN" not in str(caught.value)
    assert sum(SECRET in line for line in log_lines) == 2


# -- through a real server -------------------------------------------------------------------


@pytest.mark.e2e
async def test_an_llm_error_body_never_reaches_the_client(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub
) -> None:
    server = start_server(
        **stub.server_settings(tools_enabled="false", circuit_failure_threshold="0")
    )

    stub.reset()
    client = RTCTestClient(server.url)
    await client.connect()
    try:
        stub.script_chat(Fault.http(500, SECRET))
        client.send_rtvi("send-text", {"content": "Hello?"})
        error = await client.wait_for(lambda m: m.get("type") == "error", within=10)
    finally:
        await client.close()
        stub.reset()
    text = error["data"]["error"]
    assert text.startswith("llm: ") and "HTTP 500" in text, error
    assert error["data"]["fatal"] is False
    for part in ("sk-live", "SECRET_TOKEN", "10.20.30.40"):
        assert part not in text, text
    assert SECRET in server.log(), "the operator sees what the endpoint said"
