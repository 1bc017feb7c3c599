"""Hostile conversation input (issue 22, items 2, 9, 10f, 10g): what one client's messages
make the server keep, spend and log.

Against a real server on 127.0.0.1 with every model at the OpenAI-compatible stub:

- **typed flood** (item 2): ``--texts`` send-text messages of 4 KB with
  ``run_immediately: false`` (ASCII), then ``--emoji-texts`` more made of emoji, paced
  below the data-channel rate limit. Then: the context's tokens against its budget, the
  transcript database's growth (file and WAL) and what the record holds, the size and
  time of ``GET /api/sessions/{id}``, and
  whether ``session-info`` is answered (its size, the server CPU per call).
- **typed turns** (item 9): ``--turns`` send-text messages asking for an answer, spread
  over ``--turn-seconds``: upstream chat requests, prompt bytes sent, refusals.
- **client-ready version** (10f): a ``client-ready`` whose version is ``"².0.0"``.
- **deep client-message** (10g): a ``client-message`` nested 600 deep.
- **log**: ERROR lines, tracebacks and client data (a marker in every payload) in the
  server's log over the whole run.

    .venv/bin/python -m bench.hostile_conversation            # about 70 s
    .venv/bin/python bench/hostile_conversation.py --texts 100 --emoji-texts 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from server.process.proc import ProcReader
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

MARKER = "hostile-marker-7f3a"


def start(folder: Path, answer: str) -> tuple[OpenAIStub, ServerProcess]:
    stub = OpenAIStub().start()
    stub.config.default_text = answer
    stub.config.tts_seconds_per_char = 0.02
    env = {
        "PARLEY_LOG_LEVEL": "INFO", "PARLEY_PRELOAD_MODELS": "true", "PARLEY_GREETING": "",
        "PARLEY_STT": "openai", "PARLEY_LLM": "openai", "PARLEY_TTS": "openai",
        "PARLEY_OPENAI_BASE_URL": stub.base_url, "PARLEY_OPENAI_API_KEY": stub.api_key,
    }  # fmt: skip
    server = ServerProcess(env, folder / "server.log")
    server.wait_models_ready()
    return stub, server


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def cpu_seconds(pid: int) -> float:
    return ProcReader(pid).read().cpu_seconds or 0.0


def refusals(client: RTCTestClient, ids: set[str]) -> int:
    return sum(1 for m in client.messages if m.get("type") == "error-response" and m["id"] in ids)


async def flood(client: RTCTestClient, count: int, content: str, rate: float) -> set[str]:
    ids: set[str] = set()
    options = {"run_immediately": False}
    for _ in range(count):
        ids.add(client.send_rtvi("send-text", {"content": content, "options": options}))
        await asyncio.sleep(1 / rate)
    return ids


async def session_info(client: RTCTestClient, pid: int, calls: int) -> dict[str, Any]:
    """Whether session-info is answered, its size, and server CPU ms per call."""
    answered, size, before = 0, 0, cpu_seconds(pid)
    for _ in range(calls):
        msg_id = client.send_rtvi("client-message", {"t": "session-info"})
        try:
            reply = await client.wait_for(lambda m, i=msg_id: m.get("id") == i, within=5)
        except TimeoutError:
            continue
        answered += reply["type"] == "server-response"
        size = max(size, len(json.dumps(reply)))
    cpu_ms = 1000 * (cpu_seconds(pid) - before) / calls
    return {"answered": f"{answered}/{calls}", "reply_bytes": size, "cpu_ms_per_call": cpu_ms}


async def typed_flood(server: ServerProcess, args: argparse.Namespace) -> dict[str, Any]:
    data = server.log_path.parent / "data"
    client = RTCTestClient(server.url)
    await client.connect()
    try:
        await asyncio.sleep(1.0)
        db_before = folder_bytes(data)
        started = time.monotonic()
        ascii_text = (MARKER + " " + "x" * 4096)[:4096]
        ids = await flood(client, args.texts, ascii_text, args.rate)
        ids |= await flood(client, args.emoji_texts, "\U0001f600" * 1024, args.rate)
        seconds = time.monotonic() - started
        await asyncio.sleep(3.0)  # the store's writer catches up
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            t0 = time.perf_counter()
            response = await http.get(f"/api/sessions/{client.pc_id}")
            get_ms = 1000 * (time.perf_counter() - t0)
            record = (await http.get(f"/api/sessions/{client.pc_id}/transcript")).json()
        context = response.json()["conversation"]["context"]
        stored = sum(len(t["text"].encode()) for t in record["turns"])
        info = await session_info(client, server.proc.pid, args.info_calls)
        return {
            "texts": args.texts + args.emoji_texts,
            "seconds": round(seconds, 1),
            "refused": refusals(client, ids),
            "context_tokens": context["tokens"],
            "context_budget": context["max_tokens"],
            "db_growth_mb": round((folder_bytes(data) - db_before) / 2**20, 2),  # with the WAL
            "stored_turns": len(record["turns"]),
            "stored_text_mb": round(stored / 2**20, 2),
            "record_events": ",".join(sorted({e["type"] for e in record["events"]})) or "-",
            "get_session_bytes": len(response.content),
            "get_session_ms": round(get_ms, 1),
            "session_info_answered": info["answered"],
            "session_info_bytes": info["reply_bytes"],
            "session_info_cpu_ms": round(info["cpu_ms_per_call"], 1),
        }
    finally:
        await client.close()


async def typed_turns(server: ServerProcess, stub: OpenAIStub, args: argparse.Namespace) -> dict:
    client = RTCTestClient(server.url)
    await client.connect()
    try:
        await asyncio.sleep(1.0)
        first = len(stub.requests("/v1/chat/completions"))
        ids: set[str] = set()
        for n in range(args.turns):
            content = f"{MARKER} question {n}: what is {n} plus {n}?"
            ids.add(client.send_rtvi("send-text", {"content": content}))
            await asyncio.sleep(args.turn_seconds / args.turns)
        # Until the stub has heard nothing new for 2 s (at most 30 s).
        quiet_since, seen, deadline = time.monotonic(), first, time.monotonic() + 30
        while time.monotonic() - quiet_since < 2.0 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            now_seen = len(stub.requests("/v1/chat/completions"))
            if now_seen != seen:
                seen, quiet_since = now_seen, time.monotonic()
        requests = stub.requests("/v1/chat/completions")[first:]
        prompt = sum(len(json.dumps(r.body.get("messages", []))) for r in requests)
        return {
            "texts": args.turns,
            "seconds": args.turn_seconds,
            "refused": refusals(client, ids),
            "llm_requests": len(requests),
            "prompt_kb": round(prompt / 1024, 1),
        }
    finally:
        await client.close()


async def odd_messages(server: ServerProcess) -> dict[str, Any]:
    client = RTCTestClient(server.url)
    await client.connect()
    try:
        ready = client.send_rtvi("client-ready", {"version": "\u00b2.0.0"})
        answers = []
        try:
            answers.append(await client.wait_for(lambda m: m.get("id") == ready, within=5))
        except TimeoutError:
            pass
        deep: Any = MARKER
        for _ in range(600):
            deep = [deep]
        deep_id = client.send_rtvi("client-message", {"t": "echo", "d": deep})
        try:
            deep_reply = await client.wait_for(lambda m: m.get("id") == deep_id, within=5)
            deep_answer = deep_reply["type"] + ": " + str(deep_reply.get("data", {}))[:80]
        except TimeoutError:
            deep_answer = "no answer"
        version_errors = [a["data"]["error"] for a in answers if a["type"] == "error-response"]
        return {
            "version_answer": version_errors[0] if version_errors else "no error-response",
            "deep_answer": deep_answer,
        }
    finally:
        await client.close()


def log_figures(server: ServerProcess) -> dict[str, int]:
    lines = server.log().splitlines()
    return {
        "error_lines": sum(1 for line in lines if "| ERROR" in line),
        "traceback_lines": sum(1 for line in lines if line.startswith("Traceback")),
        # loguru's diagnose dump: every local variable, client data included.
        "variable_dump_lines": sum(1 for line in lines if "\u2514 " in line),
        "client_data_lines": sum(1 for line in lines if MARKER in line or "rtvi-ai" in line),
    }


def table(title: str, figures: dict[str, Any]) -> None:
    print(f"\n{title}\n| figure | value |\n| --- | --- |")
    for key, value in figures.items():
        print(f"| {key} | {value} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=600, help="4 KB ASCII typed texts")
    parser.add_argument("--emoji-texts", type=int, default=400, help="1024-emoji typed texts")
    parser.add_argument("--rate", type=float, default=18.0, help="texts per second")
    parser.add_argument("--info-calls", type=int, default=10, help="session-info requests")
    parser.add_argument("--turns", type=int, default=40, help="send-text asking for answers")
    parser.add_argument("--turn-seconds", type=float, default=6.0, help="spread over this")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if not (0 <= args.texts <= 2000 and 0 <= args.emoji_texts <= 2000 and 1 <= args.turns <= 200):
        parser.error("--texts and --emoji-texts within 0..2000, --turns within 1..200")
    if not (1 <= args.rate <= 19 and 1 <= args.info_calls <= 50 and args.turn_seconds > 0):
        parser.error("--rate within 1..19 (the data channel allows 20/s), --info-calls 1..50")
    folder = Path(tempfile.mkdtemp(prefix="parley-hostile-conversation-"))
    stub, server = start(folder, "Sure. Here is my answer to that question.")
    try:
        results = {
            "typed_flood": asyncio.run(typed_flood(server, args)),
            "typed_turns": asyncio.run(typed_turns(server, stub, args)),
            "odd_messages": asyncio.run(odd_messages(server)),
        }
        time.sleep(1.0)
        results["log"] = log_figures(server)
    finally:
        server.stop()
        stub.stop()
    for title, figures in results.items():
        table(title, figures)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(f"\nserver log: {server.log_path}")


if __name__ == "__main__":
    main()
