"""The limits on aiortc's SCTP (server/media/sctp_limits.py), in-process: a limited peer
connection as the server, a plain aiortc one as a hostile client that breaks its own
SCTP (bench/hostile_channel.py), over loopback. What the session makes of them is in
tests/test_data_channel_limits.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from aiortc import RTCDataChannel, RTCPeerConnection
from aiortc.rtcsctptransport import (
    SCTP_DATA_FIRST_FRAG,
    SCTP_DATA_LAST_FRAG,
    WEBRTC_DCEP,
    DataChunk,
    InboundStream,
    SackChunk,
)

from bench.hostile_channel import (
    aborts_heard,
    send_endless,
    send_huge,
    send_undecodable,
    stop_acknowledging,
)
from server.media import sctp_limits
from server.media.peer_connection import create_peer_connection
from server.media.sctp_limits import SctpLimits, UndecodableText
from server.settings.limits_channel import ChannelLimitSettings

DEFAULTS = SctpLimits.from_settings()


@dataclass
class Pair:
    """A connected client and limited server, and what the server's channels heard."""

    client: RTCPeerConnection
    server: RTCPeerConnection
    chat: RTCDataChannel
    server_channels: list[RTCDataChannel] = field(default_factory=list)
    heard: list[Any] = field(default_factory=list)

    @property
    def server_sctp(self) -> Any:
        return self.server.sctp

    async def until(self, condition: Callable[[], bool], within: float = 15.0) -> None:
        deadline = time.monotonic() + within
        while not condition():
            assert time.monotonic() < deadline, "not within the time allowed"
            await asyncio.sleep(0.02)


async def connect(limits: ChannelLimitSettings) -> Pair:
    client = RTCPeerConnection()
    server = create_peer_connection([], limits)
    chat = client.createDataChannel("chat")
    pair = Pair(client, server, chat)

    @server.on("datachannel")
    def accept(channel: RTCDataChannel) -> None:
        pair.server_channels.append(channel)
        channel.on("message", pair.heard.append)

    await client.setLocalDescription(await client.createOffer())
    await server.setRemoteDescription(client.localDescription)
    await server.setLocalDescription(await server.createAnswer())
    await client.setRemoteDescription(server.localDescription)
    await pair.until(lambda: chat.readyState == "open" and bool(pair.server_channels))
    return pair


@pytest.fixture
async def pairs() -> AsyncIterator[Callable[..., Any]]:
    made: list[Pair] = []

    async def make(**settings: Any) -> Pair:
        pair = await connect(ChannelLimitSettings(**settings))
        made.append(pair)
        return pair

    yield make
    for pair in made:
        await pair.client.close()
        await pair.server.close()


def test_aiortc_is_what_the_patch_was_written_against() -> None:
    """If this fails, aiortc changed: re-read the functions named against the wrappers in
    server/media/sctp_limits.py, then update their fingerprints in PATCHED."""
    assert sctp_limits.drift() == []


@pytest.mark.e2e  # real SCTP retransmission timers, seconds
async def test_a_peer_that_acknowledges_nothing_is_aborted(pairs: Callable[..., Any]) -> None:
    pair = await pairs(sctp_stall_seconds=2.0)
    heard = aborts_heard(pair.client)
    stop_acknowledging(pair.client)
    reply = pair.server_channels[0]
    started = time.monotonic()
    while pair.server_sctp.state != "closed":
        assert time.monotonic() - started < 20, "still retransmitting to a deaf peer"
        if reply.readyState == "open":
            reply.send("x" * 2000)  # queued behind what the peer never acknowledges
        await asyncio.sleep(0.1)
    reason = sctp_limits.abort_reason(pair.server_sctp)
    assert reason is not None and "acknowledged nothing for" in reason
    await pair.until(lambda: bool(heard))
    assert b"acknowledged nothing" in heard[0], "the peer is told why"
    assert reply.readyState == "closed"


@pytest.mark.e2e  # real SCTP retransmission timers, seconds
async def test_retransmissions_back_off_and_are_counted(pairs: Callable[..., Any]) -> None:
    pair = await pairs(sctp_stall_seconds=600.0, sctp_max_retransmissions=2)
    stop_acknowledging(pair.client)
    pair.server_channels[0].send("x")
    rtos: list[float] = []
    await pair.until(
        lambda: rtos.append(pair.server_sctp._rto) or pair.server_sctp.state == "closed", 30
    )
    assert "after 2 retries" in (sctp_limits.abort_reason(pair.server_sctp) or "")
    assert max(rtos) >= 2 * min(rtos), "RFC 4960 6.3.3 E2: the timer backs off"


@pytest.mark.e2e  # real SCTP retransmission timers, seconds
async def test_an_acknowledging_peer_is_left_alone(pairs: Callable[..., Any]) -> None:
    pair = await pairs(sctp_stall_seconds=1.0, sctp_max_retransmissions=1)
    got: list[Any] = []
    pair.chat.on("message", got.append)
    for _ in range(30):
        pair.server_channels[0].send("y" * 3000)
        await asyncio.sleep(0.1)
    await pair.until(lambda: len(got) == 30)
    await pair.until(lambda: sctp_limits.backlog_bytes(pair.server_channels[0]) == 0)
    assert pair.server_sctp.state == "connected"


def test_reassembly_visits_each_fragment_a_bounded_number_of_times() -> None:
    """aiortc rescans the whole reassembly for every fragment: n²/2 visits for n."""
    visits = [0]

    class Counting(list):  # type: ignore[type-arg]
        def __getitem__(self, index: Any) -> Any:
            visits[0] += 1
            return super().__getitem__(index)

    stream = InboundStream()
    stream.reassembly = Counting()
    n, delivered = 2000, []
    for i in range(n):
        flags = (SCTP_DATA_FIRST_FRAG if i == 0 else 0) | (SCTP_DATA_LAST_FRAG * (i == n - 1))
        chunk = DataChunk(flags=flags, body=bytes(12) + b"z" * 100)
        chunk.tsn, chunk.stream_seq = i, 0
        stream.add_chunk(chunk)  # as aiortc's receive does: add, then deliver what is whole
        delivered += stream.pop_messages()
    assert [len(m[2]) for m in delivered] == [100 * n]
    assert visits[0] < 10 * n, f"{visits[0]} visits for {n} fragments"


async def test_a_huge_message_is_aborted_before_it_costs_much(pairs: Callable[..., Any]) -> None:
    pair = await pairs(sctp_receive_buffer_bytes=327680)
    heard = aborts_heard(pair.client)
    send_huge(pair.chat, 4 * 2**20)
    await pair.until(lambda: pair.server_sctp.state == "closed", 30)
    assert "unfinished messages over 327680 bytes" in sctp_limits.abort_reason(pair.server_sctp)
    await pair.until(lambda: bool(heard))
    assert pair.heard == [], "nothing of it delivered"


async def test_a_message_that_never_ends_is_aborted(pairs: Callable[..., Any]) -> None:
    pair = await pairs(sctp_receive_buffer_bytes=327680)
    sent = await send_endless(pair.chat, seconds=20, kbps=400)
    assert pair.server_sctp.state == "closed", "the peer's window is not the limit"
    assert sent < 2 * 327680 + 400 * 1024, "aborted once the budget was spent"
    assert "unfinished messages" in (sctp_limits.abort_reason(pair.server_sctp) or "")


async def test_a_peer_that_leaves_a_tsn_out_is_aborted(pairs: Callable[..., Any]) -> None:
    """Every TSN past the missing one is kept, and sorted for each chunk received."""
    pair = await pairs(sctp_receive_buffer_bytes=327680)
    limits = SctpLimits.from_settings(ChannelLimitSettings(sctp_receive_buffer_bytes=327680))
    sctp = pair.client.sctp
    sctp._local_tsn = (sctp._local_tsn + 1) % 2**32  # a TSN that is never sent
    for _ in range(2 * limits.max_out_of_order):
        pair.chat.send("m")  # each delivered at once: nothing waits in reassembly
    await pair.until(lambda: pair.server_sctp.state == "closed", 30)
    assert "past a missing one" in (sctp_limits.abort_reason(pair.server_sctp) or "")


async def test_gap_reports_cost_only_what_is_outstanding(pairs: Callable[..., Any]) -> None:
    pair = await pairs()
    sack = SackChunk()
    sack.cumulative_tsn = pair.server_sctp._last_sacked_tsn
    sack.advertised_rwnd = 2**20
    sack.gaps = [(1, 65535)] * 200  # 13 million TSNs in one packet
    started = time.process_time()
    for _ in range(5):
        await pair.client.sctp._send_chunk(sack)
    pair.chat.send("after")
    await pair.until(lambda: "after" in pair.heard, 60)
    assert time.process_time() - started < 3, "aiortc walks each TSN a gap names"
    assert pair.server_sctp.state == "connected"


async def test_the_advertised_window_and_streams(pairs: Callable[..., Any]) -> None:
    pair = await pairs(max_data_channels=2, sctp_receive_buffer_bytes=327680)
    limits = SctpLimits.from_settings(ChannelLimitSettings(max_data_channels=2))
    assert pair.client.sctp._outbound_streams_count == limits.max_streams == 6
    assert pair.client.sctp._ssthresh <= 327680, "the window a peer is told to respect"
    assert replace(DEFAULTS, receive_buffer_bytes=327680).advertised_window >= 262144


async def test_channels_beyond_the_streams_are_refused(pairs: Callable[..., Any]) -> None:
    pair = await pairs(max_data_channels=2)  # 6 streams
    extra = [pair.client.createDataChannel(f"x{i}") for i in range(40)]
    await pair.until(lambda: sum(c.readyState == "open" for c in extra) >= 2)
    await asyncio.sleep(0.5)
    sctp = pair.server_sctp
    assert len(sctp._data_channels) <= 6 and len(sctp._inbound_streams) <= 6
    assert all(c.id < 6 for c in pair.server_channels)
    pair.chat.send("still here")
    await pair.until(lambda: "still here" in pair.heard)
    assert sctp.state == "connected"


async def test_text_that_is_not_utf8_arrives_marked(pairs: Callable[..., Any]) -> None:
    pair = await pairs()
    await send_undecodable(pair.chat, b"\xff\xfe{")
    pair.chat.send("after")
    await pair.until(lambda: "after" in pair.heard)
    assert [m for m in pair.heard if isinstance(m, UndecodableText)] == [b"\xff\xfe{"]
    assert pair.server_sctp.state == "connected"


async def test_a_dcep_open_for_an_open_stream_is_dropped(pairs: Callable[..., Any]) -> None:
    pair = await pairs()
    sctp = pair.client.sctp
    again = bytes([3, 0]) + bytes(6) + (4).to_bytes(2) + bytes(2) + b"chat"
    sctp._data_channel_queue.append((pair.chat, WEBRTC_DCEP, again))
    await sctp._data_channel_flush()
    pair.chat.send("after")
    await pair.until(lambda: "after" in pair.heard)
    assert pair.server_sctp.state == "connected"
    assert pair.server.connectionState == "connected"
