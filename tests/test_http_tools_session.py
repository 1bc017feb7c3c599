"""HTTP tools configured on a real server (``PARLEY_HTTP_TOOLS``): offered to the LLM with
their schema, called with the arguments as JSON and the secret header from the environment,
the response in the context; a header naming a variable that is not set stops the start
with a clear message (no traceback).

A real server (subprocess), the OpenAI-compatible stub, the aiortc test client, and a plain
HTTP endpoint on 127.0.0.1 standing in for the operator's backend.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from testkit.openai_stub import ChatReply, OpenAIStub, ToolCall
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ROOT, ServerProcess

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
SECRET = "s3cret-token-value"


class Backend(BaseHTTPRequestHandler):
    """Answers POST /stock with the stock of the SKU it was sent; records each request."""

    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Backend.seen.append({"body": body, "authorization": self.headers["Authorization"]})
        answer = json.dumps({"sku": body["sku"], "in_stock": 4}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass  # quiet


@pytest.fixture(scope="module")
def backend() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/stock"
    httpd.shutdown()
    httpd.server_close()


def stock_tool(url: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "check_stock",
            "description": "How many of a product are in stock.",
            "parameters": {
                "type": "object",
                "properties": {"sku": {"type": "string", "description": "The product code."}},
                "required": ["sku"],
            },
            "url": url,
            "headers": {"Authorization": "Bearer ${STOCK_TOKEN}"},
        }
    ]


@pytest.fixture(scope="module")
def http_server(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub, backend: str
) -> Iterator[ServerProcess]:
    os.environ["STOCK_TOKEN"] = SECRET  # the server's environment inherits it
    try:
        yield start_server(**stub.server_settings(http_tools=json.dumps(stock_tool(backend))))
    finally:
        os.environ.pop("STOCK_TOKEN", None)


async def test_an_http_tool_is_offered_called_with_the_secret_and_answered(
    http_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    Backend.seen.clear()
    call = ToolCall("check_stock", {"sku": "BK-42"}, id="call_stock")
    stub.script_chat(ChatReply(tool_calls=(call,)), "We have four.")
    async with RTCTestClient(http_server.url) as client:
        client.send_rtvi("send-text", {"content": "Do you have BK-42?"})
        assert await stub.wait_for(lambda: len(stub.requests(CHAT)) >= 2, within=15)
    first, second = (r.body for r in stub.requests(CHAT)[:2])
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert offered["check_stock"]["parameters"]["required"] == ["sku"]
    result = next(m for m in second["messages"] if m.get("tool_call_id") == "call_stock")
    assert json.loads(result["content"]) == {"sku": "BK-42", "in_stock": 4}
    assert Backend.seen == [{"body": {"sku": "BK-42"}, "authorization": f"Bearer {SECRET}"}]
    assert SECRET not in json.dumps(second)  # the secret never reaches the LLM


def test_a_header_naming_an_unset_variable_stops_the_start(backend: str) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PARLEY_HTTP_TOOLS": json.dumps(stock_tool(backend)),
        "PARLEY_PRELOAD_MODELS": "false",
    }
    done = subprocess.run(
        [sys.executable, "-m", "server"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "STOCK_TOKEN" in done.stderr and "check_stock" in done.stderr
    assert "Traceback" not in done.stderr
