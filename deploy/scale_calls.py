"""Calls through the balancer for ``deploy/scale_test.py``: the two ways a client opens a
session (the official client's ``/start`` flow and a plain ``/api/offer``), a spoken turn,
and the checks' vocabulary (:func:`check`, :func:`until`, :class:`Failure`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

from testkit.rtc_client import RTCTestClient

Flow = Literal["start", "offer"]
LOUD = 200.0  # a received frame louder than this (RMS) is the bot speaking


class Failure(Exception):
    """A check that did not hold; its message says what was expected and what came."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise Failure(what)


def ok(what: str) -> None:
    print(f"  ok  {what}", flush=True)


async def until(predicate: Callable[[], Any], what: str, within: float = 10.0) -> Any:
    """Poll ``predicate`` every 50 ms until it returns something truthy."""
    deadline = time.monotonic() + within
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise Failure(f"{what}: not within {within} s")
        await asyncio.sleep(0.05)
    return value


def owner(an_id: str) -> str:
    """The replica an id names: what precedes its first '.'."""
    return an_id.split(".", 1)[0]


@dataclass
class Call:
    """One connected WebRTC client and how it connected."""

    client: RTCTestClient
    flow: Flow
    session_id: str | None  # the /start session id (flow "start")

    @property
    def pc_id(self) -> str:
        assert self.client.pc_id is not None
        return self.client.pc_id

    @property
    def replica(self) -> str:
        return owner(self.pc_id)

    def ids(self) -> set[str]:
        return {self.pc_id} | ({self.session_id} if self.session_id else set())


async def open_call(url: str, flow: Flow) -> Call:
    """A client through the balancer at ``url``, up to ``bot-ready``.

    ``start``: POST /start, then POST and PATCH (trickle) /sessions/{id}/api/offer, as
    Pipecat's ``startBotAndConnect``. ``offer``: POST /api/offer, PATCH /api/offer with
    the pc_id in the body, then a renegotiating POST /api/offer with it: routed by the
    body alone, it must come back with the same pc_id (another replica would make a new
    session with a new id)."""
    client = RTCTestClient(url)
    try:
        if flow == "start":
            response = await client.http.post("/start", json={})
            started = response.raise_for_status().json()
            await client.connect(session_id=started["sessionId"])
            call = Call(client, flow, started["sessionId"])
            check(
                owner(call.pc_id) == owner(started["sessionId"]),
                f"pc_id {call.pc_id} made by another replica than session {started['sessionId']}",
            )
        else:
            await client.connect()
            call = Call(client, flow, None)
            answer = await client.renegotiate()
            check(answer["pc_id"] == call.pc_id, f"renegotiating {call.pc_id} → {answer['pc_id']}")
        return call
    except BaseException:
        await client.close()
        raise


async def open_calls(url: str, flows: list[Flow]) -> list[Call]:
    """One call per flow, one after the other (the balancer sees no two at once)."""
    calls = []
    for flow in flows:
        calls.append(await open_call(url, flow))
    return calls


async def spoken_turn(call: Call, wav: Path, within: float = 20.0) -> float:
    """Speak ``wav`` and wait for the bot's whole answer; returns its voice-to-voice time
    (end of the WAV → first loud frame; an upper bound, the WAV ends in silence)."""
    client = call.client
    before = client.types().count("bot-stopped-speaking")
    played = client.play(str(wav))
    await until(
        lambda: client.types().count("bot-stopped-speaking") > before,
        f"{call.pc_id}: the bot's answer",
        within,
    )
    loud = [t for t, rms in client.audio.frames if t > played and rms > LOUD]
    check(bool(loud), f"{call.pc_id}: the answer had no audio")
    return loud[0] - played


async def session_status(url: str, pc_id: str) -> tuple[int, str]:
    """``GET /api/sessions/{pc_id}`` at ``url`` (the balancer or one replica)."""
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        response = await http.get(f"/api/sessions/{pc_id}")
        return response.status_code, response.text


async def health(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        return (await http.get("/health")).raise_for_status().json()


async def close_all(calls: list[Call]) -> None:
    await asyncio.gather(*(c.client.close() for c in calls), return_exceptions=True)
