"""Opus both ways, over WebRTC. The bot's voice as the client receives it: CELT at 64
kbit/s within the TTS's bandwidth, and hybrid under the cap of a client whose offer sets
``maxaveragebitrate`` (RFC 7587). A real server speaks its greeting through the stub's
TTS (24 kHz); an aiortc client's audio receiver records each RTP payload. And the
caller's: the answer asks for speech up to 8 kHz at 32 kbit/s (real Chromium then sends
SILK alone, wide-band)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from server.media.transceivers import opus_parameter
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def models() -> Iterator[OpenAIStub]:
    with OpenAIStub() as stub:
        stub.config.tts_voice = "speech"
        stub.config.tts_seconds_per_char = 0.06  # a human rate: the greeting lasts ~2 s
        yield stub


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], models: OpenAIStub) -> ServerProcess:
    return start_server(**models.server_settings(greeting="Hello there! How can I help you?"))


def _capped(sdp: str, bitrate: int) -> str:
    """``sdp`` with ``maxaveragebitrate`` on its Opus format."""
    payload_type = re.search(r"a=rtpmap:(\d+) opus/48000", sdp, re.I)
    assert payload_type
    line = f"a=fmtp:{payload_type[1]} "
    if line in sdp:
        return sdp.replace(line, f"{line}maxaveragebitrate={bitrate};", 1)
    rtpmap = f"a=rtpmap:{payload_type[1]} "
    end = sdp.index("\r\n", sdp.index(rtpmap)) + 2
    return f"{sdp[:end]}{line}maxaveragebitrate={bitrate}\r\n{sdp[end:]}"


async def _greeting_payloads(server: ServerProcess, cap: int | None) -> list[bytes]:
    """The payloads of the greeting's loud packets, as the client received them."""
    client = RTCTestClient(server.url, jitter_frames=1)
    receiver = client.pc.getTransceivers()[0].receiver
    handle = receiver._handle_rtp_packet
    payloads: list[bytes] = []

    async def spy(packet: Any, arrival_time_ms: int) -> None:
        payloads.append(packet.payload)
        await handle(packet, arrival_time_ms=arrival_time_ms)

    receiver._handle_rtp_packet = spy
    if cap is not None:
        post = client.post_offer

        async def post_capped(sdp: str, restart_pc: bool = False) -> dict[str, Any]:
            return await post(_capped(sdp, cap), restart_pc=restart_pc)

        client.post_offer = post_capped  # type: ignore[method-assign]
    try:
        await client.connect()
        await client.wait_for(lambda m: m.get("type") == "bot-stopped-speaking", within=15)
        await asyncio.sleep(0.1)
    finally:
        await client.close()
    return [p for p in payloads if len(p) > 20]  # the voice, not its silence or DTX


async def test_the_voice_goes_as_celt_within_the_tts_bandwidth(server: ServerProcess) -> None:
    payloads = await _greeting_payloads(server, None)
    assert len(payloads) > 50  # a second of the greeting at least
    configs = {p[0] >> 3 for p in payloads}
    # The TOC's configuration: 24-27 is CELT coding up to 12 kHz, all a 24 kHz voice has.
    assert configs <= set(range(24, 28)), configs
    bitrate = sum(map(len, payloads)) * 8 / (len(payloads) * 0.02)
    assert 48000 < bitrate < 80000


async def test_a_client_that_caps_the_bitrate_gets_hybrid_under_its_cap(
    server: ServerProcess,
) -> None:
    payloads = await _greeting_payloads(server, 24000)
    assert len(payloads) > 50
    assert all(p[0] >> 3 < 16 for p in payloads)  # SILK or hybrid: speech at a low rate
    bitrate = sum(map(len, payloads)) * 8 / (len(payloads) * 0.02)
    assert bitrate <= 24000 * 1.1


async def test_the_answer_asks_for_speech_up_to_8_khz_at_32_kbits(server: ServerProcess) -> None:
    client = RTCTestClient(server.url)
    try:
        await client.connect()
        answer = client.pc.remoteDescription.sdp
    finally:
        await client.close()
    assert opus_parameter(answer, "maxplaybackrate") == 16000
    assert opus_parameter(answer, "maxaveragebitrate") == 32000
    assert opus_parameter(answer, "useinbandfec") == 1
