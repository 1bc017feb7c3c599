"""What the WebSocket transports share (server/transports/socket_call.py): the bounds a
client cannot get past. Real sockets are in tests/test_pcm_socket.py and
tests/test_phone_call.py; here a stand-in for Starlette's WebSocket that never reads what
it is sent (a stalled client whose socket buffers are full), which a real loopback socket
would take minutes of audio to become."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.websockets import WebSocketState

from server.guards.rate_limit import TokenBucket
from server.media.inbound_audio import PacketGate
from server.rtvi.protocol import RTVIError
from server.transports.base import TransportHooks
from server.transports.pcm_socket import PcmSocketTransport
from server.transports.socket_call import FRAME_BYTES, SocketClosed, SocketLimits


class StalledSocket:
    """Accepts sends that never complete; receives only what the test puts in."""

    application_state = WebSocketState.CONNECTED

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.closed: tuple[int, str] | None = None

    async def receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def send_text(self, text: str) -> None:
        await asyncio.Event().wait()

    async def send_bytes(self, data: bytes) -> None:
        await asyncio.Event().wait()

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


class Heard:
    def __init__(self) -> None:
        self.audio: list[bytes] = []
        self.closes: list[tuple[str, str | None]] = []
        self.reports: list[RTVIError] = []

    def hooks(self) -> TransportHooks:
        return TransportHooks(
            on_audio=self.audio.append, on_rtvi=lambda _: None, on_alive=lambda: None,
            on_connected=lambda: None, on_report=self.reports.append,
            on_fault=lambda where, exc: None,
            on_close=lambda reason, error: self.closes.append((reason, error)),
            on_dtmf=lambda _: None,
        )  # fmt: skip


def transport(heard: Heard, backlog: int = 10_000, burst: int = 200) -> PcmSocketTransport:
    limits = SocketLimits(PacketGate(100, 200), TokenBucket(100, burst), 65536, backlog)
    return PcmSocketTransport(StalledSocket(), heard.hooks(), limits)  # type: ignore[arg-type]


async def test_a_client_that_stops_reading_ends_its_call_at_the_backlog_bound() -> None:
    heard = Heard()
    call = transport(heard, backlog=10_000)
    running = asyncio.create_task(call.run())
    call.outbound.write(bytes(48000 * 2), 48000)  # a second of the bot
    for _ in range(100):
        if heard.closes:
            break
        await asyncio.sleep(0.02)
    assert heard.closes and "not reading" in heard.closes[0][0]
    assert call.backlog == 0 and call.state == "failed", "what waited is dropped"
    assert call.close_code == 1008
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)


async def test_audio_is_cut_into_20_ms_frames_whatever_the_message_sizes() -> None:
    heard = Heard()
    call = transport(heard)
    for size in (100, 1000, 180, 2000):
        call.receive(bytes(size))
    assert [len(f) for f in heard.audio] == [FRAME_BYTES] * (3280 // FRAME_BYTES)


async def test_a_message_flood_is_dropped_and_told_once() -> None:
    heard = Heard()
    call = transport(heard, burst=10)
    call.state = "connected"
    for _ in range(30):
        call._serve(b"\0\0")
    assert 15 <= call.dropped_messages <= 20  # the burst of 10 went through
    assert len(heard.reports) == 1 and "too many messages" in str(heard.reports[0])


async def test_a_flood_far_past_the_budget_ends_the_call() -> None:
    """Each dropped message still costs its parse: five bursts' worth over, it is closed."""
    heard = Heard()
    call = transport(heard, burst=10)
    call.state = "connected"
    for _ in range(60):
        call._serve(b"\0\0")  # the burst, then drops, all within a few milliseconds
    with pytest.raises(SocketClosed) as closed:
        for _ in range(20):
            call._serve(b"\0\0")
    assert closed.value.code == 1008 and "too many messages" in closed.value.reason
    assert call.dropped_messages == 51
