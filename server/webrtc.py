"""The media side of a peer connection: configuration, inbound audio, paced outbound audio."""

from __future__ import annotations

import asyncio
import fractions
import time
from collections.abc import Callable

import numpy as np
from aiortc import (
    MediaStreamTrack,
    RTCBundlePolicy,
    RTCConfiguration,
    RTCIceServer,
    RTCPeerConnection,
)
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame, AudioResampler

from server.settings import IceServer

PIPELINE_RATE = 16000
FRAME_SECONDS = 0.02
PIPELINE_FRAME_BYTES = int(PIPELINE_RATE * FRAME_SECONDS) * 2  # 20 ms of s16 mono
OUT_RATE = 48000
OUT_SAMPLES = int(OUT_RATE * FRAME_SECONDS)
OUT_FRAME_BYTES = OUT_SAMPLES * 2
# Past this much lateness the output clock is reset instead of bursting frames to catch up.
MAX_LATENESS = 0.1


def create_peer_connection(ice_servers: list[IceServer]) -> RTCPeerConnection:
    """A peer connection using only the configured ICE servers, bundled on one transport."""
    servers = [
        RTCIceServer(urls=s.urls, username=s.username, credential=s.credential) for s in ice_servers
    ]
    config = RTCConfiguration(iceServers=servers, bundlePolicy=RTCBundlePolicy.MAX_BUNDLE)
    return RTCPeerConnection(configuration=config)


async def read_inbound_audio(track: MediaStreamTrack, on_frame: Callable[[bytes], None]) -> None:
    """Read a remote audio track until it ends, delivering 20 ms 16 kHz mono s16 frames.

    aiortc decodes Opus to 48 kHz stereo; one stateful resampler turns that into the
    pipeline's format, and a small buffer cuts its output into fixed 640-byte frames.
    """
    resampler = AudioResampler(format="s16", layout="mono", rate=PIPELINE_RATE)
    pending = bytearray()
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        for out in resampler.resample(frame):
            pending += memoryview(out.planes[0])[: out.samples * 2]
        while len(pending) >= PIPELINE_FRAME_BYTES:
            on_frame(bytes(pending[:PIPELINE_FRAME_BYTES]))
            del pending[:PIPELINE_FRAME_BYTES]


class PacedAudioTrack(MediaStreamTrack):
    """Outbound audio: 20 ms, 48 kHz mono frames paced against the wall clock.

    ``write`` queues PCM at any sample rate (resampled once to 48 kHz); ``recv`` sends
    silence whenever nothing is queued; ``flush`` drops everything queued at once, which
    is how barge-in silences the bot.
    """

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queue = bytearray()
        self._resamplers: dict[int, AudioResampler] = {}
        self._silence = bytes(OUT_FRAME_BYTES)
        self._start: float | None = None
        self._pts = 0

    @property
    def queued_seconds(self) -> float:
        """Seconds of audio waiting to be played."""
        return len(self._queue) / (2 * OUT_RATE)

    def write(self, pcm: bytes | np.ndarray, sample_rate: int) -> None:
        """Queue mono s16 PCM (bytes or an int16 array) recorded at ``sample_rate``."""
        if sample_rate == OUT_RATE:
            self._queue += pcm.tobytes() if isinstance(pcm, np.ndarray) else pcm
            return
        samples = pcm if isinstance(pcm, np.ndarray) else np.frombuffer(pcm, dtype=np.int16)
        if samples.size == 0:
            return
        frame = AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = sample_rate
        resampler = self._resamplers.get(sample_rate)
        if resampler is None:
            resampler = AudioResampler(format="s16", layout="mono", rate=OUT_RATE)
            self._resamplers[sample_rate] = resampler
        for out in resampler.resample(frame):
            self._queue += memoryview(out.planes[0])[: out.samples * 2]

    def flush(self) -> None:
        """Drop all queued audio; the next frame sent is silence."""
        self._queue.clear()
        self._resamplers.clear()

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        else:
            self._pts += OUT_SAMPLES
            wait = self._start + self._pts / OUT_RATE - now
            if wait > 0:
                await asyncio.sleep(wait)
            elif wait < -MAX_LATENESS:
                self._start -= wait
        if self._queue:
            chunk = bytes(self._queue[:OUT_FRAME_BYTES])
            del self._queue[:OUT_FRAME_BYTES]
            if len(chunk) < OUT_FRAME_BYTES:
                chunk += self._silence[len(chunk) :]
        else:
            chunk = self._silence
        frame = AudioFrame(format="s16", layout="mono", samples=OUT_SAMPLES)
        frame.planes[0].update(chunk)
        frame.pts = self._pts
        frame.sample_rate = OUT_RATE
        frame.time_base = fractions.Fraction(1, OUT_RATE)
        return frame
