"""A hostile client's data channel (issue 22, items 1, 3, 10a, 10b): what it may leave
unacknowledged, how large a message it may start, text that is not UTF-8, how many
channels it may open. The channel's policy in-process first, then against real servers
with a bystander session that must not notice. The SCTP mechanisms themselves are in
tests/test_sctp_limits.py; the figures in bench/hostile_channel.py."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from pyee import EventEmitter

from bench.hostile_channel import aborts_heard, send_huge, send_undecodable, stop_acknowledging
from server.media import data_channel
from server.media.data_channel import ChatChannel
from server.media.sctp_limits import UndecodableText
from server.settings.limits_channel import ChannelLimitSettings
from testkit.measure import log_problems
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

# -- the channel's policy, in-process -------------------------------------------------------


class Wire(EventEmitter):
    """A data channel double: what is sent on it, and whether it was closed."""

    def __init__(self, label: str = "chat", state: str = "open") -> None:
        super().__init__()
        self.label = label
        self.readyState = state
        self.sent: list[dict[str, Any]] = []

    def send(self, text: str) -> None:
        self.sent.append(json.loads(text))

    def close(self) -> None:
        self.readyState = "closed"
        self.emit("close")


class Recorded:
    """A ChatChannel with every callback recorded."""

    def __init__(self, **limits: Any) -> None:
        self.invalid: list[str] = []
        self.fatal: list[str] = []
        self.rtvi: list[Any] = []
        self.channel = ChatChannel(
            on_alive=lambda: None,
            on_signalling=lambda message: None,
            on_rtvi=self.rtvi.append,
            on_invalid=self.invalid.append,
            limits=ChannelLimitSettings(**limits),
            on_fatal=self.fatal.append,
        )


def rtvi(type_: str, **extra: Any) -> dict[str, Any]:
    return {"label": "rtvi-ai", "type": type_, **extra}


@pytest.fixture
def backlog(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """What the channel is told its client has left unacknowledged (set [0])."""
    value = [0]
    monkeypatch.setattr(data_channel.sctp_limits, "backlog_bytes", lambda channel: value[0])
    return value


def test_within_half_the_budget_everything_goes(backlog: list[int]) -> None:
    recorded, wire = Recorded(max_buffered_bytes=100_000), Wire()
    recorded.channel.attach(wire)
    backlog[0] = 49_000
    for kind in ("user-audio-level", "server-response", "bot-output"):
        recorded.channel.send(rtvi(kind, id="r1", data={}))
    assert [m["type"] for m in wire.sent] == ["user-audio-level", "server-response", "bot-output"]


def test_past_half_decorations_are_dropped_and_replies_withheld(backlog: list[int]) -> None:
    recorded, wire = Recorded(max_buffered_bytes=100_000), Wire()
    recorded.channel.attach(wire)
    backlog[0] = 60_000
    recorded.channel.send(rtvi("user-audio-level", data={"value": 0.5}))
    recorded.channel.send(rtvi("metrics", data={}))
    recorded.channel.send(rtvi("server-response", id="r1", data={"t": "echo", "d": "x" * 30}))
    recorded.channel.send(rtvi("user-transcription", data={"text": "hi", "final": True}))
    withheld, transcript = wire.sent
    assert withheld["type"] == "error-response" and withheld["id"] == "r1"
    assert "reply withheld: " in withheld["data"]["error"], "the request is answered"
    assert transcript["type"] == "user-transcription", "what the call needs still goes"
    assert recorded.channel.shed == 3 and recorded.fatal == []


def test_past_the_budget_the_session_is_told_to_close(backlog: list[int]) -> None:
    recorded, wire = Recorded(max_buffered_bytes=100_000), Wire()
    recorded.channel.attach(wire)
    backlog[0] = 100_000
    recorded.channel.send(rtvi("bot-output", data={"text": "hello"}))
    recorded.channel.send(rtvi("bot-output", data={"text": "again"}))
    assert wire.sent == []
    [reason] = recorded.fatal
    assert "unacknowledged" in reason and "(limit 100000)" in reason


def test_giving_up_while_draining_what_waited(
    backlog: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded, wire = Recorded(max_buffered_bytes=100_000), Wire(state="connecting")
    # As aiortc does: aborting the association closes its channels at once.
    monkeypatch.setattr(data_channel.sctp_limits, "abort", lambda sctp, reason: wire.close())
    recorded.channel.attach(wire)
    for i in range(3):
        recorded.channel.send(rtvi("bot-output", data={"i": i}))
    backlog[0] = 100_000
    wire.readyState = "open"
    wire.emit("open")
    recorded.channel.send(rtvi("bot-output", data={"i": 3}))
    assert wire.sent == [] and len(recorded.fatal) == 1
    assert not recorded.channel.is_open


def test_what_waits_for_the_channel_to_open_is_bounded_in_bytes(backlog: list[int]) -> None:
    recorded, wire = Recorded(max_buffered_bytes=65536), Wire(state="connecting")
    recorded.channel.attach(wire)
    for i in range(50):
        recorded.channel.send(rtvi("server-message", data={"i": i, "pad": "p" * 10_000}))
    wire.readyState = "open"
    wire.emit("open")
    assert 1 <= len(wire.sent) <= 7 and wire.sent[-1]["data"]["i"] == 49, "the newest kept"


def test_channels_past_the_limit_are_closed_and_chat_gets_the_replies(
    backlog: list[int],
) -> None:
    recorded = Recorded(max_data_channels=2)
    other, chat, extra, more = Wire("other"), Wire("chat"), Wire("x"), Wire("y")
    for wire in (other, chat, extra, more):
        recorded.channel.attach(wire)
    assert extra.readyState == more.readyState == "closed"
    assert recorded.invalid == ["too many data channels (limit 2): closed 'x'"], "told, once"
    other.emit("message", '{"label": "rtvi-ai", "type": "client-ready", "id": "a"}')
    assert recorded.rtvi, "an accepted channel is served"
    recorded.channel.send(rtvi("bot-ready", id="a", data={}))
    assert [len(w.sent) for w in (other, chat, extra, more)] == [0, 1, 0, 0]
    chat.close()
    recorded.channel.send(rtvi("bot-output", data={}))
    assert len(other.sent) == 1, "replies move to what is left"


def test_text_that_is_not_utf8_is_refused_with_a_reason() -> None:
    recorded, wire = Recorded(), Wire()
    recorded.channel.attach(wire)
    wire.emit("message", UndecodableText(b'{"type": "\xff"}'))
    assert recorded.invalid == ["malformed text: not UTF-8"] and recorded.rtvi == []


# -- against real servers -------------------------------------------------------------------


@pytest.fixture(scope="module")
def stalling(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """A peer that acknowledges nothing for 3 s is closed."""
    return start_server(liveness_timeout="3", sctp_stall_seconds="3", max_data_channels="3")


@pytest.fixture(scope="module")
def budgeted(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """128 KB may wait for a client; stalls are tolerated for long."""
    return start_server(max_buffered_bytes="131072", sctp_stall_seconds="120")


async def until(predicate: Callable[[], Any], within: float) -> None:
    deadline = time.monotonic() + within
    while not await predicate():
        assert time.monotonic() < deadline, f"not within {within} s"
        await asyncio.sleep(0.1)


async def session_gone(server: ServerProcess, pc_id: str) -> bool:
    async with httpx.AsyncClient(timeout=5) as http:
        return (await http.get(f"{server.url}/api/sessions/{pc_id}")).status_code == 404


async def close_reason(server: ServerProcess, pc_id: str) -> str:
    async with httpx.AsyncClient(timeout=5) as http:
        return (await http.get(f"{server.url}/api/sessions/{pc_id}/transcript")).json()[
            "close_reason"
        ]


async def assert_still_serving(client: RTCTestClient) -> None:
    reply = await client.request("echo", {"n": 1})
    assert reply["type"] == "server-response" and reply["data"]["d"] == {"n": 1}


def assert_no_errors_logged(server: ServerProcess) -> None:
    problems = log_problems(server.log())
    assert problems["errors"] == 0, problems["first_errors"]


async def connected(server: ServerProcess) -> tuple[RTCTestClient, RTCTestClient]:
    pair = (RTCTestClient(server.url), RTCTestClient(server.url))
    for client in pair:
        await client.connect()
    return pair


async def close_all(*clients: RTCTestClient) -> None:
    for client in clients:
        await client.close()


async def echo_flood(client: RTCTestClient, kb: int, per_second: float, stop: Any) -> None:
    """``echo`` requests of ``kb`` KB until ``stop()`` is true."""
    while not await stop():
        if client.channel.readyState == "open":
            client.send_rtvi("client-message", {"t": "echo", "d": "e" * (kb * 1000)})
        await asyncio.sleep(1 / per_second)


@pytest.mark.e2e
async def test_a_client_that_acknowledges_nothing_is_closed(stalling: ServerProcess) -> None:
    hostile, bystander = await connected(stalling)
    try:
        heard = aborts_heard(hostile.pc)
        stop_acknowledging(hostile.pc)  # it still pings, and asks for replies
        gone = lambda: session_gone(stalling, hostile.pc_id)  # noqa: E731
        await asyncio.wait_for(echo_flood(hostile, 20, 5, gone), 30)  # under its budget
        assert "acknowledged nothing for" in await close_reason(stalling, hostile.pc_id)
        assert heard and b"acknowledged nothing" in heard[0], "told why, in the ABORT"
        await assert_still_serving(bystander)
    finally:
        await close_all(hostile, bystander)
    assert_no_errors_logged(stalling)


@pytest.mark.e2e
async def test_a_client_that_reads_too_little_is_closed_at_its_budget(
    budgeted: ServerProcess,
) -> None:
    """Replies past half the budget are withheld (a few bytes each); what the app pushes
    is not, so it reaches the budget."""
    hostile, bystander = await connected(budgeted)
    try:
        heard = aborts_heard(hostile.pc)
        stop_acknowledging(hostile.pc)
        url = f"{budgeted.url}/api/sessions/{hostile.pc_id}/server-message"
        async with httpx.AsyncClient(timeout=5) as http:
            for i in range(10):  # 300 KB, of which 128 KB may wait
                pushed = await http.post(url, json={"data": {"i": i, "pad": "p" * 30_000}})
                if pushed.status_code == 404:
                    break
        await until(lambda: session_gone(budgeted, hostile.pc_id), 10)
        reason = await close_reason(budgeted, hostile.pc_id)
        assert "unacknowledged (limit 131072)" in reason
        await until(lambda: asyncio.sleep(0, bool(heard)), 5)
        assert b"unacknowledged" in heard[0], "told why, in the ABORT"
        await assert_still_serving(bystander)
    finally:
        await close_all(hostile, bystander)
    assert_no_errors_logged(budgeted)


@pytest.mark.e2e
async def test_a_huge_message_is_aborted_early(stalling: ServerProcess) -> None:
    hostile, bystander = await connected(stalling)
    try:
        heard = aborts_heard(hostile.pc)
        send_huge(hostile.channel, 4 * 2**20)  # past the 256 KB the server advertises

        await until(lambda: asyncio.sleep(0, bool(heard)), 30)
        assert b"unfinished messages over" in heard[0]
        await until(lambda: session_gone(stalling, hostile.pc_id), 10)
        assert "unfinished messages" in await close_reason(stalling, hostile.pc_id)
        assert not [m for m in hostile.messages if "too large" in str(m)], "never reassembled"
        await assert_still_serving(bystander)
    finally:
        await close_all(hostile, bystander)
    assert_no_errors_logged(stalling)


@pytest.mark.e2e
async def test_text_that_is_not_utf8_is_refused_and_the_session_stays(
    stalling: ServerProcess,
) -> None:
    hostile, bystander = await connected(stalling)
    try:
        await send_undecodable(hostile.channel)
        told = await hostile.wait_for(lambda m: m.get("type") == "error")
        assert told["data"] == {"error": "malformed text: not UTF-8", "fatal": False}
        await assert_still_serving(hostile)
        await assert_still_serving(bystander)
    finally:
        await close_all(hostile, bystander)
    assert "Task exception was never retrieved" not in stalling.log()
    assert_no_errors_logged(stalling)


@pytest.mark.e2e
async def test_extra_channels_are_closed_and_replies_stay_on_chat(
    stalling: ServerProcess,
) -> None:
    hostile, bystander = await connected(stalling)
    try:
        extra = [hostile.pc.createDataChannel(f"extra{i}") for i in range(12)]
        elsewhere: list[Any] = []
        for channel in extra:
            channel.on("message", elsewhere.append)
        told = await hostile.wait_for(lambda m: m.get("type") == "error")
        assert told["data"]["error"].startswith("too many data channels (limit 3): closed ")
        await assert_still_serving(hostile)
        assert elsewhere == [], "every reply on chat"

        async def settled() -> bool:
            return sum(c.readyState == "open" for c in extra) <= 2  # chat + 2 of 3

        await until(settled, 10)
        await assert_still_serving(bystander)
    finally:
        await close_all(hostile, bystander)
    assert_no_errors_logged(stalling)
