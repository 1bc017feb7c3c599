"""Hostile tool endpoints (issue 42, items 5 and 9): a gzip bomb from an HTTP tool's
endpoint, and a huge result from an MCP server.

- ``gzip``: an HTTP endpoint on 127.0.0.1 answers every call with ``--bomb-mb`` MB of
  ``x`` gzipped twice (``Content-Encoding: gzip, gzip``: a few hundred bytes on the wire).
  One call of an HTTP tool (``HTTPTools``, in this process) to it; figures: the bytes on
  the wire, the result's length, the Python heap's peak during the call (tracemalloc) and
  the rise of this process's peak RSS (``VmHWM``, reset through ``/proc/self/clear_refs``).
- ``server``: a Parley server (subprocess) with every model at the OpenAI-compatible stub,
  the bomb's endpoint as an HTTP tool (``bomb``) and two MCP servers
  (``testkit.mcp_server``: one over stdio, one over streamable HTTP answering with JSON
  bodies). The scripted LLM calls ``bomb``, then each server's ``blob`` tool for
  ``--mcp-mb`` MB of text, then the HTTP one's for 0.4 MB; per call the figures are the
  size of the tool's result in the next chat-completions request the stub received, of
  that whole request, and the rise of the server's peak RSS during the call
  (``/proc/<pid>/clear_refs``).

Everything goes to 127.0.0.1 only and is bounded in size and time.

    .venv/bin/python bench/hostile_tools.py [--only gzip,server] [--bomb-mb 48] [--mcp-mb 10]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a file from any folder
    sys.path.insert(0, str(ROOT))

from pipeline.tools.sources.config import HTTPToolConfig  # noqa: E402
from pipeline.tools.sources.http import HTTPTools  # noqa: E402
from testkit.mcp_server import HTTPServerProcess  # noqa: E402
from testkit.openai_stub import ChatReply, OpenAIStub, ToolCall  # noqa: E402
from testkit.rtc_client import RTCTestClient  # noqa: E402
from testkit.server_process import ServerProcess  # noqa: E402

SCENARIOS = ("gzip", "server")
CHAT = "/v1/chat/completions"
MB = 2**20


# -- memory ------------------------------------------------------------------------------------


def _status_kb(pid: int | str, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reset_peak(pid: int | str = "self") -> int:
    """Reset the process's peak RSS to its RSS now (Linux ≥ 4.0); that RSS in KB."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status_kb(pid, "VmRSS")


def peak_rise_mb(pid: int | str, before_kb: int) -> float:
    return round((_status_kb(pid, "VmHWM") - before_kb) / 1024, 1)


# -- the gzip bomb -------------------------------------------------------------------------------


def bomb(megabytes: int) -> bytes:
    return gzip.compress(gzip.compress(b"x" * (megabytes * MB), 9), 9)


class BombHandler(BaseHTTPRequestHandler):
    """Every request: the bomb, ``Content-Encoding: gzip, gzip``."""

    body: ClassVar[bytes] = b""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Encoding", "gzip, gzip")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass  # quiet


@contextmanager
def bomb_server(megabytes: int) -> Iterator[str]:
    BombHandler.body = bomb(megabytes)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BombHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/bomb"
    finally:
        httpd.shutdown()
        httpd.server_close()


async def one_call(url: str) -> Any:
    tools = HTTPTools([HTTPToolConfig(name="bomb", url=url, timeout=60)], environ={})
    try:
        (spec,) = tools.specs()
        assert spec.handler is not None
        return await spec.handler()
    finally:
        await tools.aclose()


def run_gzip(megabytes: int) -> dict[str, Any]:
    with bomb_server(megabytes) as url:
        asyncio.run(one_call(url))  # warm: imports, the pool, the allocator's arenas
        before = reset_peak()
        started = time.perf_counter()
        result = asyncio.run(one_call(url))
        seconds = time.perf_counter() - started
        rss = peak_rise_mb("self", before)
        tracemalloc.start()
        try:
            asyncio.run(one_call(url))
            heap = tracemalloc.get_traced_memory()[1] / MB
        finally:
            tracemalloc.stop()
    text = result if isinstance(result, str) else json.dumps(result)
    return {
        "decoded_mb": megabytes,
        "wire_bytes": len(BombHandler.body),
        "result_chars": len(text),
        "result_start": text[:60],
        "heap_peak_mb": round(heap, 1),
        "rss_peak_rise_mb": rss,
        "seconds": round(seconds, 3),
    }


# -- a huge MCP result -------------------------------------------------------------------------


def http_tools(bomb_url: str) -> str:
    return json.dumps([{"name": "bomb", "url": bomb_url, "timeout": 60}])


def mcp_servers(http_url: str) -> str:
    stdio = [sys.executable, "-m", "testkit.mcp_server", "--transport", "stdio"]
    servers = [
        {"name": "local", "command": [*stdio, "--name", "local"], "timeout": 60},
        {"name": "remote", "url": http_url, "timeout": 60},
    ]
    return json.dumps(servers)


async def ask_for(
    server: ServerProcess, stub: OpenAIStub, tool: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """One call asking for ``tool``: the next LLM request's figures."""
    stub.reset()
    call_id = f"call_{tool}"
    stub.script_chat(ChatReply(tool_calls=(ToolCall(tool, arguments, id=call_id),)), "Ok.")
    before = reset_peak(server.proc.pid)
    async with RTCTestClient(server.url) as client:
        client.send_rtvi("send-text", {"content": "Fetch it."})
        assert await stub.wait_for(lambda: len(stub.requests(CHAT)) >= 2, within=120)
    rise = peak_rise_mb(server.proc.pid, before)
    body = stub.requests(CHAT)[1].body
    message = next(m for m in body["messages"] if m.get("tool_call_id") == call_id)
    return {
        "tool": tool,
        "tool_message_kb": round(len(message["content"].encode()) / 1024, 1),
        "request_kb": round(len(json.dumps(body).encode()) / 1024, 1),
        "server_rss_peak_rise_mb": rise,
        "result_start": message["content"][:60],
    }


def run_server(bomb_mb: int, mcp_mb: int, folder: Path) -> list[dict[str, Any]]:
    calls = [  # (what, tool, arguments)
        (f"{bomb_mb} (gzip, gzip)", "bomb", {}),
        (mcp_mb, "blob", {"size": mcp_mb * MB}),
        (mcp_mb, "remote_blob", {"size": mcp_mb * MB}),
        (0.4, "remote_blob", {"size": 400_000}),  # within the HTTP transport's 1 MiB
    ]
    with (
        OpenAIStub() as stub,
        HTTPServerProcess("remote", json_response=True) as remote,
        bomb_server(bomb_mb) as bomb_url,
    ):
        settings = stub.server_settings(
            http_tools=http_tools(bomb_url),
            mcp_servers=mcp_servers(remote.url),
            context_summarization="off",  # no summary request among the ones measured
        )
        env = {f"PARLEY_{k.upper()}": v for k, v in settings.items()}
        server = ServerProcess(env, folder / "server.log")
        try:
            time.sleep(2.0)  # the MCP servers connected
            rows = []
            for size, tool, arguments in calls:
                row = asyncio.run(ask_for(server, stub, tool, arguments))
                rows.append({"result_mb": size, **row})
            return rows
        finally:
            server.stop()


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(SCENARIOS), help="gzip,mcp")
    parser.add_argument("--bomb-mb", type=int, default=48, help="decoded size, 1..256")
    parser.add_argument("--mcp-mb", type=int, default=10, help="the MCP result, 1..64")
    args = parser.parse_args()
    only = [s for s in args.only.split(",") if s]
    if not set(only) <= set(SCENARIOS):
        parser.error(f"--only takes {', '.join(SCENARIOS)}")
    if not 1 <= args.bomb_mb <= 256 or not 1 <= args.mcp_mb <= 64:
        parser.error("--bomb-mb within 1..256, --mcp-mb within 1..64")
    folder = Path(tempfile.mkdtemp(prefix="parley-hostile-tools-"))
    if "gzip" in only:
        g = run_gzip(args.bomb_mb)
        print(json.dumps(g, indent=2))
        print("| decoded MB | bytes on the wire | result chars | heap peak MB | "
              "RSS peak rise MB | seconds |")  # fmt: skip
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        print(f"| {g['decoded_mb']} | {g['wire_bytes']} | {g['result_chars']} | "
              f"{g['heap_peak_mb']} | {g['rss_peak_rise_mb']} | {g['seconds']} |")  # fmt: skip
        print()
    if "server" in only:
        rows = run_server(args.bomb_mb, args.mcp_mb, folder)
        print(json.dumps(rows, indent=2))
        print("| tool | result MB | tool message in the LLM request KB | whole request KB | "
              "server RSS peak rise MB |")  # fmt: skip
        print("| --- | ---: | ---: | ---: | ---: |")
        for r in rows:
            print(f"| {r['tool']} | {r['result_mb']} | {r['tool_message_kb']} | "
                  f"{r['request_kb']} | {r['server_rss_peak_rise_mb']} |")  # fmt: skip
    print(f"\nlogs: {folder}")


if __name__ == "__main__":
    main()
