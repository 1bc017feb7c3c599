"""Client input that must be refused with a reason and never reach the logs (issue 22,
10f and 10g): JSON nested too deep, refused when read; a non-ASCII protocol version; and
no local-variable dumps (client data) in tracebacks."""

from __future__ import annotations

import ast
import asyncio
import io
import json
from typing import Any

import pytest
from loguru import logger

from server.guards import client_json
from server.ops.logs import configure_logging
from server.rtvi import protocol
from server.rtvi.handler import ClientMessages, RTVIHandler
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ROOT, ServerProcess


def nested(levels: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


# -- the reader ---------------------------------------------------------------------------


def test_the_reader_refuses_past_the_depth_and_keeps_the_id() -> None:
    assert client_json.loads(json.dumps(nested(32))) == nested(32)
    message = {"label": "rtvi-ai", "type": "client-message", "id": "m7",
               "data": {"t": "echo", "d": nested(600)}}  # fmt: skip
    with pytest.raises(client_json.TooDeep, match="nested deeper than 32 levels") as refused:
        client_json.loads(json.dumps(message))
    assert refused.value.msg_id == "m7"


def test_brackets_inside_strings_do_not_nest() -> None:
    text = json.dumps({"a": "[[[[{{{{" * 100, "b": ['\\"]]]', '"[[[[' * 50]})
    assert client_json.loads(text)["a"].startswith("[[[[")
    assert client_json.text_depth(text) == 2


def test_absurd_nesting_is_refused_without_parsing_it() -> None:
    text = "[" * 100_000 + "]" * 100_000  # past what Python's parser can take
    with pytest.raises(client_json.TooDeep) as refused:
        client_json.loads(text)
    assert refused.value.msg_id is None


@pytest.mark.parametrize("version", ["\u00b2.0.0", "\u0663.0.0", "2.\uff11.0", "v2", ""])
def test_a_version_must_be_ascii_digits(version: str) -> None:
    assert protocol.version_major(version) is None
    error = protocol.version_error(version)
    assert error is not None and error.startswith("invalid RTVI version")


@pytest.mark.parametrize("version", ["1.4.0", "2.1.0", "2.0.0-beta.1", "1.0", "2"])
def test_valid_versions_pass(version: str) -> None:
    assert protocol.version_error(version) is None


class Recording:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.clients: list[Any] = []

    def send(self, msg: dict[str, Any]) -> None:
        self.sent.append(msg)

    def set_client(self, ready: Any) -> None:
        self.clients.append(ready)


async def test_a_non_ascii_version_is_answered_with_the_reason_and_served() -> None:
    session = Recording()
    handler = RTVIHandler(session, ClientMessages.with_defaults())  # type: ignore[arg-type]
    faults: list[Exception] = []
    handler.on_fault = lambda where, exc: faults.append(exc)
    handler.handle({"label": "rtvi-ai", "type": "client-ready", "id": "r1",
                    "data": {"version": "\u00b2.0.0"}})  # fmt: skip
    assert not faults, "not an internal error"
    error, ready = session.sent
    assert error["type"] == "error-response" and error["id"] == "r1"
    assert error["data"]["error"].startswith("invalid RTVI version '\u00b2.0.0'")
    assert ready["type"] == "bot-ready"


# -- the logs -------------------------------------------------------------------------------


def test_tracebacks_carry_no_variable_values() -> None:
    stream = io.StringIO()
    configure_logging("INFO", as_json=False, stream=stream)
    try:
        client_text = "what-the-client-typed-3f9"  # a local, as in any handler
        client_text.index("boom")  # fails on a line that names it
    except ValueError:
        logger.exception("a handler failed")
    finally:
        logger.remove()
        logger.add(io.StringIO())  # leave a quiet sink for the other tests
    output = stream.getvalue()
    assert "ValueError: substring not found" in output
    assert "what-the-client-typed-3f9" not in output


def test_every_log_sink_is_added_without_diagnose() -> None:
    """loguru's ``diagnose`` defaults to on: every ``logger.add`` must turn it off."""
    offenders = []
    for path in [*(ROOT / "server").rglob("*.py"), *(ROOT / "pipeline").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "logger"
            ):
                keywords = {k.arg: k.value for k in node.keywords}
                safe = "diagnose" in keywords or None in keywords  # **SAFE_TRACEBACKS
                if not safe:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


# -- a real server --------------------------------------------------------------------------


@pytest.mark.e2e
async def test_a_deep_message_and_an_odd_version_are_answered_and_never_logged_as_errors(
    server: ServerProcess,
) -> None:
    async with RTCTestClient(server.url) as client:
        deep = client.send_rtvi("client-message", {"t": "echo", "d": nested(600, "hush-7c1")})
        refused = await client.wait_for(lambda m: m.get("id") == deep, within=5)
        ready = client.send_rtvi("client-ready", {"version": "\u00b2.0.0"})
        odd = await client.wait_for(lambda m: m.get("id") == ready, within=5)
        echoed = await client.request("echo", nested(20))
        await asyncio.sleep(0.5)
    assert refused["type"] == "error-response"
    assert refused["data"]["error"] == "JSON nested deeper than 32 levels"
    assert odd["type"] == "error-response" and "invalid RTVI version" in odd["data"]["error"]
    assert echoed["data"]["d"] == nested(20), "ordinary nesting still served"
    log = server.log()
    assert "| ERROR" not in log and "Traceback" not in log
    assert "hush-7c1" not in log
