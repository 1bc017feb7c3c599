"""Hostile phone streams (issue 42, items 2 and 3): one address taking every session slot,
webhooks replayed, stream tokens reused, and one tenant hanging up another's call.

Starts its own servers on 127.0.0.1 (models never load) and a fake of Twilio's REST API,
and plays:

- ``slots``: on an open server with the production per-address caps, one address opens
  23 Twilio streams; then a ``/ws`` caller from another address tries to get a slot.
- ``replay``: one signed webhook posted 6 times: answers, and distinct tokens minted.
- ``reuse``: one stream token (one CallSid) presented by 23 streams at once; a token with
  a start that names no call (``?provider=twilio``, no ``callSid``).
- ``hangup``: with two API keys, a stream admitted by the second key names the CallSid of
  a call admitted by its webhook's token, then deletes its own session: whether the fake
  Twilio REST API is asked to hang the victim up.

Everything is bounded in count and time and goes to 127.0.0.1 only.

    .venv/bin/python bench/hostile_phone.py [--only slots,replay,reuse,hangup]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a file from any folder
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

from bench.hostile_sockets import KEY, PUBLIC, TWILIO_TOKEN, serving  # noqa: E402
from server.telephony.signature import twilio_signature  # noqa: E402
from testkit.fake_twilio_rest import fake_twilio_rest  # noqa: E402
from testkit.raw_websocket import TEXT, RawWebSocket, frame  # noqa: E402

SCENARIOS = ("slots", "replay", "reuse", "hangup")
ACCOUNT = "AC" + "0123456789abcdef" * 2
KEY2 = "k2-secret-bbbb"


def twilio_start(call_sid: str, parameters: dict[str, str] | None = None) -> list[bytes]:
    """Twilio's first two messages: ``connected``, then ``start``."""
    sid = "MZ" + uuid.uuid4().hex
    start: dict[str, Any] = {"streamSid": sid, "customParameters": parameters or {},
                             "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000,
                                             "channels": 1}}  # fmt: skip
    if call_sid:
        start["callSid"] = call_sid
    messages = [{"event": "connected"}, {"event": "start", "streamSid": sid, "start": start}]
    return [frame(TEXT, json.dumps(m).encode()) for m in messages]


async def stream(port: int, call_sid: str, parameters: dict[str, str] | None = None,
                 source: str = "127.0.0.2", query: str = "",
                 headers: dict[str, str] | None = None) -> RawWebSocket:  # fmt: skip
    """A Twilio stream that has sent its start."""
    client = RawWebSocket()
    await client.open("127.0.0.1", port, "/telephony/ws" + query, headers, source=source)
    if client.status == 101:
        for message in twilio_start(call_sid, parameters):
            await client.send(message)
    return client


async def still_open(clients: list[RawWebSocket], within: float = 2.0) -> int:
    """How many of ``clients`` the server has not closed within ``within`` s."""
    closes = await asyncio.gather(*(c.close_frame(within) for c in clients))
    return sum(close is None for close in closes)


async def signed_webhook(url: str, call_sid: str) -> httpx.Response:
    form = {"CallSid": call_sid, "AccountSid": ACCOUNT, "From": "+14155550100"}
    signature = twilio_signature(TWILIO_TOKEN, f"{PUBLIC}/telephony/twiml", form)
    async with httpx.AsyncClient(base_url=url) as http:
        return await http.post("/telephony/twiml", data=form,
                               headers={"X-Twilio-Signature": signature})  # fmt: skip


def stream_token(twiml: str) -> str:
    found = ET.fromstring(twiml).find("./Connect/Stream/Parameter[@name='token']")
    return found.get("value", "") if found is not None else ""


async def slots() -> None:
    with serving(public_url=PUBLIC) as server:
        clients = [await stream(server.port, "CA" + uuid.uuid4().hex) for _ in range(23)]
        await asyncio.sleep(1.0)
        async with httpx.AsyncClient(base_url=server.url) as http:
            held = (await http.get("/api/sessions")).json()["sessions"]
        url = server.url.replace("http://", "ws://") + "/ws"
        outcome = "admitted"
        async with connect(url, local_addr=("127.0.1.1", 0)) as legit:
            try:
                await asyncio.wait_for(legit.recv(), 2.0)
            except ConnectionClosed as exc:
                outcome = f"refused ({exc.rcvd.code if exc.rcvd else '?'}: "
                outcome += f"{exc.rcvd.reason if exc.rcvd else ''})"
            except TimeoutError:
                pass
        for c in clients:
            c.abort()
        print(
            f"slots: one address opened 23 phone streams, the server held {len(held)} "
            f"sessions; a /ws caller from another address: {outcome}"
        )


async def replay() -> None:
    with serving(public_url=PUBLIC, twilio_auth_token=TWILIO_TOKEN) as server:
        answers = [await signed_webhook(server.url, "CA" + "1" * 32) for _ in range(6)]
        tokens = {stream_token(a.text) for a in answers if a.status_code == 200}
        print(
            f"replay: one signed webhook posted 6 times: answers "
            f"{[a.status_code for a in answers]}, {len(tokens)} distinct tokens"
        )


async def reuse() -> None:
    with serving(public_url=PUBLIC, twilio_auth_token=TWILIO_TOKEN,
                 max_sessions_per_address="0", max_sessions_per_network="0",
                 max_pending_per_address="0", max_pending_per_network="0") as server:  # fmt: skip
        sid = "CA" + "2" * 32
        token = stream_token((await signed_webhook(server.url, sid)).text)
        clients = [await stream(server.port, sid, {"token": token}) for _ in range(23)]
        held = await still_open(clients)
        for c in clients:
            c.abort()
        sid = "CA" + "3" * 32
        token = stream_token((await signed_webhook(server.url, sid)).text)
        nameless = await stream(server.port, "", {"token": token}, query="?provider=twilio")
        admitted = await still_open([nameless])
        nameless.abort()
        print(
            f"reuse: one token, one CallSid, 23 streams at once: {held} held; a start "
            f"naming no call with a valid token: {'admitted' if admitted else 'refused'}"
        )


async def hangup() -> None:
    with fake_twilio_rest(ACCOUNT, TWILIO_TOKEN) as rest, serving(
        public_url=PUBLIC, twilio_auth_token=TWILIO_TOKEN, twilio_account_sid=ACCOUNT,
        twilio_api_url=rest.url, api_keys=json.dumps([KEY, KEY2]),
    ) as server:  # fmt: skip
        victim_sid = "CA" + "4" * 32
        token = stream_token((await signed_webhook(server.url, victim_sid)).text)
        victim = await stream(server.port, victim_sid, {"token": token})
        attacker = await stream(server.port, victim_sid,
                                headers={"Authorization": f"Bearer {KEY2}"})  # fmt: skip
        await asyncio.sleep(1.0)
        headers = {"Authorization": f"Bearer {KEY2}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers) as http:
            mine = (await http.get("/api/sessions")).json()["sessions"]
            for session in mine:
                await http.delete(f"/api/sessions/{session['pc_id']}")
        await asyncio.sleep(1.0)
        print(
            f"hangup: the second key held {len(mine)} session(s) and deleted them; the "
            f"REST API was asked to hang up {rest.hung_up or 'nothing'} "
            f"(the victim's call: {victim_sid})"
        )
        for c in (victim, attacker):
            with contextlib.suppress(Exception):
                c.abort()


async def main(only: list[str]) -> None:
    for name in SCENARIOS:
        if name in only:
            await globals()[name]()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help=f"comma-separated, of {', '.join(SCENARIOS)}")
    args = parser.parse_args()
    asyncio.run(main(args.only.split(",") if args.only else list(SCENARIOS)))
