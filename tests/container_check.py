"""Talk to a running Parley container from the host, as ``make container-test`` does.

``python -m tests.container_check http://127.0.0.1:PORT`` checks ``/health``, makes one real
SDP offer/answer with the RTVI ``client-ready``/``bot-ready`` handshake, waits for the
embedded models and for the spoken greeting (the TTS works inside the image), asks one
text-only question (so does the LLM), hangs up, and prints how long each step took.
With ``--turn turn:HOST:PORT --turn-password P`` a second client, allowed relay candidates
only, connects through that TURN server and must hear the greeting through it.
Exit status 0 means every step passed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import httpx
from aiortc import RTCConfiguration, RTCIceServer, RTCIceTransportPolicy

from testkit.rtc_client import RTCTestClient


async def wait_models_ready(http: httpx.AsyncClient, within: float) -> float:
    """Seconds until /health reports every embedded model loaded."""
    started = time.monotonic()
    while not (await http.get("/health")).json()["models"]["ready"]:
        if time.monotonic() - started > within:
            raise TimeoutError(f"models not ready after {within} s")
        await asyncio.sleep(0.5)
    return time.monotonic() - started


async def wait_greeting(client: RTCTestClient, ready: float, within: float) -> float:
    """Seconds from ``bot-ready`` (at ``ready``) until the greeting was heard; returns once
    it is over (a second of silence), so that the next turn does not interrupt it."""
    await client.wait_for(lambda m: m.get("type") == "bot-started-speaking", within)
    deadline = time.monotonic() + within
    while (heard := next((t for t, rms in client.audio.frames if rms > 200.0), None)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError("no greeting audio")
        await asyncio.sleep(0.1)
    while client.silent_since(heard, hold=50) is None:
        if time.monotonic() > deadline:
            raise TimeoutError("the greeting never ended")
        await asyncio.sleep(0.2)
    return heard - ready


async def check(base_url: str, within: float) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        health = (await http.get("/health")).raise_for_status().json()
        print(f"/health: status {health['status']}, version {health['version']}")
        assert health["status"] == "ok", health

        client = RTCTestClient(base_url)
        try:
            handshake = await client.connect()
            ready = time.monotonic()
            print(
                f"offer/answer + client-ready/bot-ready: {handshake:.2f} s (pc_id {client.pc_id})"
            )

            waited = await wait_models_ready(http, within)
            print(f"models ready after a further {waited:.1f} s")

            greeting = await wait_greeting(client, ready, within)
            loud = client.audio.loud_frames()
            print(f"greeting: heard {greeting:.1f} s after bot-ready ({loud} loud 20 ms frames)")
            assert loud > 0, "the greeting was announced but no audio arrived"

            started = time.monotonic()
            seen = len(client.messages)
            earlier = {id(m) for m in client.messages}
            client.send_rtvi(
                "send-text", {"content": "Say hello.", "options": {"audio_response": False}}
            )
            await client.wait_for(
                lambda m: m.get("type") == "bot-llm-stopped" and id(m) not in earlier, within
            )
            answer = "".join(
                m["data"]["text"]
                for m in client.messages[seen:]
                if m.get("type") == "bot-output" and m["data"].get("spoken") is False
            )
            print(f"text turn: answered in {time.monotonic() - started:.1f} s: {answer!r}")
            assert answer.strip(), "empty answer"
            errors = [m for m in client.messages if m.get("type") in ("error", "error-response")]
            assert not errors, f"errors from the server: {errors}"
        finally:
            await client.close()

        await hang_up_all(http)


async def check_relayed(base_url: str, turn: RTCIceServer, within: float) -> None:
    """Media and data through the TURN server: the client gathers relay candidates only."""
    relay_only = RTCConfiguration(iceServers=[turn], iceTransportPolicy=RTCIceTransportPolicy.RELAY)
    client = RTCTestClient(base_url, configuration=relay_only)
    try:
        handshake = await client.connect()
        ready = time.monotonic()
        kinds = {line.split()[7] for line in client.pc.localDescription.sdp.splitlines()
                 if line.startswith("a=candidate:")}  # fmt: skip
        assert kinds == {"relay"}, f"local candidate types {kinds}, expected relay only"
        print(f"through TURN {turn.urls}: offer/answer + handshake {handshake:.2f} s")
        greeting = await wait_greeting(client, ready, within)
        print(f"through TURN: greeting heard {greeting:.1f} s after bot-ready")
        reply = await client.request("echo", {"via": "turn"})
        assert reply.get("type") == "server-response", reply
    finally:
        await client.close()
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        await hang_up_all(http)


async def hang_up_all(http: httpx.AsyncClient) -> None:
    for session in (await http.get("/api/sessions")).json()["sessions"]:
        await http.delete(f"/api/sessions/{session['pc_id']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="base URL of the server, e.g. http://127.0.0.1:7860")
    parser.add_argument("--within", type=float, default=120, help="seconds allowed per step")
    parser.add_argument("--turn", help="also connect relayed through this TURN URL")
    parser.add_argument("--turn-user", default="parley")
    parser.add_argument("--turn-password", default="")
    args = parser.parse_args()
    try:
        asyncio.run(check(args.url, args.within))
        if args.turn:
            turn = RTCIceServer(args.turn, args.turn_user, args.turn_password)
            asyncio.run(check_relayed(args.url, turn, args.within))
    except (AssertionError, TimeoutError, httpx.HTTPError) as exc:
        print(f"container check failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print("container check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
