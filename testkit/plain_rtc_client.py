"""A WebRTC client as a new user writes one with aiortc: aiortc's own Opus encoder and decoder.

:class:`~testkit.rtc_client.RTCTestClient` codes its microphone itself, as a browser
would after reading the answer (SILK at 16 kHz), and decodes what it receives on its
loop at 16 kHz mono, so that many fit beside a server. A plain aiortc client does
neither: its microphone's frames go to aiortc's encoder (resampled to stereo, 96 kbit/s,
full band, whatever the answer asks), and what it receives is decoded in aiortc's thread
at 48 kHz stereo, through its jitter buffer. :class:`PlainRTCClient` is that client, for
benches that measure the server as such clients see it (issue 48's held-out run).
"""

from __future__ import annotations

import asyncio
import fractions
from typing import Any

import numpy as np
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame

from testkit.rtc_client import RTCTestClient
from testkit.rtc_microphone import TestMicrophone

_TIME_BASE = fractions.Fraction(1, 48000)


class PlainMicrophone(TestMicrophone):
    """The test microphone's audio as raw 48 kHz mono frames, for aiortc to encode."""

    def follow(self, answer_sdp: str) -> None:
        """aiortc's encoder codes as it always does, whatever the answer asks."""

    async def recv(self) -> AudioFrame:  # type: ignore[override]  # frames, not packets
        pcm, _ = await self.next_pcm()
        frame = AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = 48000, self._pts, _TIME_BASE
        return frame


class PlainRTCClient(RTCTestClient):
    """:class:`~testkit.rtc_client.RTCTestClient` with aiortc's own media paths."""

    def microphone(self) -> TestMicrophone:
        return PlainMicrophone()

    def receive_audio(self, receiver: Any, prefetch: int) -> None:
        self._listening: asyncio.Future[None] | None = None

        @self.pc.on("track")
        def on_track(track: Any) -> None:
            if track.kind == "audio" and self._listening is None:
                self._listening = asyncio.ensure_future(self._listen(track))

    async def _listen(self, track: Any) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            stereo = frame.to_ndarray().reshape(-1, 2).astype(np.int32)
            mono = (stereo.sum(axis=1) // 2).astype(np.int16)
            self._on_pcm(mono[::3].tobytes())  # the RMS is all that is kept: 16 kHz will do

    async def close(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
            await asyncio.gather(self._listening, return_exceptions=True)
        await super().close()
