"""A client sending audio packets faster than a microphone can is capped before decoding:
the excess is dropped (counted, the client told once), the session goes on, and the
other sessions do not notice (server/media/inbound_audio.py, ``PacketGate``)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from aiortc import MediaStreamTrack, RTCPeerConnection
from aiortc.mediastreams import MediaStreamError
from aiortc.rtcdtlstransport import RTCDtlsTransport
from aiortc.rtcrtpreceiver import RTCRtpReceiver
from av import Packet
from pydantic import ValidationError

from server.media.inbound_audio import PacketGate
from server.media.opus import OpusEncoder
from server.settings import Settings
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess, metric

RATE, BURST = 60, 250  # the defaults of PARLEY_AUDIO_PACKET_RATE and _BURST


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_gate_admits_the_burst_then_the_rate_and_tells_once() -> None:
    clock, told, drops = FakeClock(), [], []
    gate = PacketGate(60, 5, on_flood=told.append, clock=clock)
    gate.on_drop = lambda: drops.append(1)
    assert [gate.admit() for _ in range(8)] == [True] * 5 + [False] * 3
    clock.now += 1.0  # a second later: 60 more, never more than the burst at once
    assert sum(gate.admit() for _ in range(100)) == 5
    assert gate.dropped == 3 + 95 == len(drops)
    assert len(told) == 1 and "faster than 60 a second" in told[0]


def test_a_steady_20_ms_stream_is_never_dropped() -> None:
    clock = FakeClock()
    gate = PacketGate(RATE, BURST, clock=clock)
    for _ in range(50 * 60):  # a minute of 20 ms packets
        assert gate.admit()
        clock.now += 0.02


def test_a_failing_flood_report_does_not_escape_into_aiortc() -> None:
    def broken(error: str) -> None:
        raise RuntimeError("the channel is gone")

    gate = PacketGate(1, 1, on_flood=broken, clock=FakeClock())
    assert gate.admit() and not gate.admit()  # no exception: the DTLS loop goes on


async def test_aiortc_still_hands_every_rtp_packet_to_the_receivers_handler() -> None:
    """The gate stands in for ``RTCRtpReceiver._handle_rtp_packet``, looked up on the
    receiver for each packet by the DTLS transport: if aiortc changes either, the cap
    would silently stop applying."""
    source = inspect.getsource(RTCDtlsTransport._handle_rtp_data)
    assert "receiver._handle_rtp_packet(packet, arrival_time_ms=arrival_time_ms)" in source
    params = list(inspect.signature(RTCRtpReceiver._handle_rtp_packet).parameters)
    assert params == ["self", "packet", "arrival_time_ms"]

    pc = RTCPeerConnection()
    receiver = pc.addTransceiver("audio").receiver
    seen: list[Any] = []

    async def original(packet: Any, arrival_time_ms: int) -> None:
        seen.append(packet)

    receiver._handle_rtp_packet = original  # type: ignore[method-assign]
    gate = PacketGate(1, 2, clock=FakeClock())
    gate.guard(receiver)
    gate.guard(receiver)  # a renegotiation: still one gate
    for n in range(5):
        await receiver._handle_rtp_packet(n, arrival_time_ms=0)
    assert seen == [0, 1] and gate.dropped == 3
    await pc.close()


class FloodingMicrophone(MediaStreamTrack):
    """Opus packets of a tone with the timestamps of a 20 ms stream, sent at ``rate``
    packets a second: a client that sends audio far faster than it is spoken."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self.rate = 50.0
        self.sent = 0
        encoder = OpusEncoder()
        t = np.arange(25 * 960) / 48000
        pcm = (6000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
        self._payloads = [bytes(encoder.encode(pcm[i : i + 960].tobytes(), i))
                          for i in range(0, pcm.size, 960)]  # fmt: skip
        self._due = time.monotonic()

    async def recv(self) -> Packet:  # type: ignore[override]
        if self.readyState != "live":
            raise MediaStreamError
        self._due = max(self._due + 1 / self.rate, time.monotonic() - 0.1)
        await asyncio.sleep(max(0.0, self._due - time.monotonic()))
        packet = Packet(self._payloads[self.sent % len(self._payloads)])
        packet.pts, packet.time_base = self.sent * 960, Fraction(1, 48000)
        self.sent += 1
        return packet


async def _info(client: RTCTestClient) -> dict[str, Any]:
    response = await client.http.get(f"/api/sessions/{client.pc_id}")
    response.raise_for_status()
    return response.json()


async def _window(client: RTCTestClient, mic: FloodingMicrophone, seconds: float) -> dict:
    """Packets sent and frames decoded by the server over about ``seconds``."""
    before, sent, started = await _info(client), mic.sent, time.monotonic()
    await asyncio.sleep(seconds)
    after = await _info(client)
    return {
        "sent": mic.sent - sent,
        "decoded": after["audio_frames_in"] - before["audio_frames_in"],
        "dropped": after.get("audio_packets_dropped", 0) - before.get("audio_packets_dropped", 0),
        "elapsed": time.monotonic() - started,
    }


@pytest.fixture(scope="module")
def capped(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server(liveness_timeout="10")


@pytest.mark.e2e
async def test_a_packet_flood_is_capped_before_decoding_and_the_session_goes_on(
    capped: ServerProcess,
) -> None:
    flooder, bystander = RTCTestClient(capped.url), RTCTestClient(capped.url)
    mic = FloodingMicrophone()
    try:
        for client in (flooder, bystander):
            await client.connect()
        flooder.pc.getTransceivers()[0].sender.replaceTrack(mic)
        await asyncio.sleep(1.0)  # the steady stream under way

        mic.rate = 1000.0  # 20 times a microphone's rate, for about 2 s
        flood = await _window(flooder, mic, 2.0)
        assert flood["sent"] > 600, f"the flood was sent: {flood}"
        # Decoded: at most the rate over the window, plus the burst (and a little slack
        # for the packets of the steady stream already in the jitter buffer).
        assert flood["decoded"] <= RATE * flood["elapsed"] + BURST + 10, flood
        assert flood["dropped"] >= flood["sent"] - RATE * flood["elapsed"] - BURST - 10, flood

        told = [m for m in flooder.messages if m.get("type") == "error"]
        assert len(told) == 1, told  # once, not per packet
        assert "audio packets arrive faster than 60 a second" in told[0]["data"]["error"]
        assert told[0]["data"]["fatal"] is False

        mic.rate = 50.0  # back to a microphone's pace: decoded again, nothing dropped
        await asyncio.sleep(0.5)
        steady = await _window(flooder, mic, 2.0)
        assert steady["dropped"] == 0 and steady["decoded"] >= 0.7 * steady["sent"], steady
        reply = await flooder.request("session-info")
        assert reply["type"] == "server-response", reply
        assert len([m for m in flooder.messages if m.get("type") == "error"]) == 1

        other = await _info(bystander)
        assert other["audio_packets_dropped"] == 0 and other["state"] == "connected"
        assert (await bystander.request("session-info"))["type"] == "server-response"
        assert metric(capped, "parley_audio_packets_dropped_total") >= flood["dropped"]
    finally:
        for client in (flooder, bystander):
            await client.close()
    log = capped.log()
    assert "ERROR" not in log and "Traceback" not in log


def test_the_rate_and_burst_are_settings_with_bounds() -> None:
    settings = Settings(audio_packet_rate=120, audio_packet_burst=10)
    assert (settings.audio_packet_rate, settings.audio_packet_burst) == (120, 10)
    assert (Settings().audio_packet_rate, Settings().audio_packet_burst) == (RATE, BURST)
    for bad in ({"audio_packet_rate": 0}, {"audio_packet_burst": 0}):
        with pytest.raises(ValidationError):
            Settings(**bad)
