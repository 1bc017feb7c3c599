"""The test client's microphone: WAVs played in real time, silence between, the room's
echo mixed in, coded as Opus packets of 20 ms (see :class:`TestMicrophone`)."""

from __future__ import annotations

import asyncio
import time
import wave

import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError
from av import Packet

from server.media.opus import MIN_BITRATE, OpusEncoder
from server.media.transceivers import opus_parameter


class TestMicrophone(MediaStreamTrack):
    """A microphone that never stops: it plays the WAVs it is given, in real time, and
    silence in between (as a browser's does), as Opus packets of 20 ms. It encodes them
    itself, as the server's track does, so that many clients fit beside a server on one
    machine (aiortc would resample to stereo and encode in a thread)."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._start: float | None = None
        self._pts = 0
        self._pending = np.zeros(0, np.int16)
        self._encoder = OpusEncoder()
        # What comes back from the loudspeaker, by the sample it is heard at.
        self._echo = np.zeros(0, np.float32)
        self._echo_at = 0  # the sample _echo[0] is heard at

    def follow(self, answer_sdp: str) -> None:
        """Code what the answer asks for, as a browser does (libwebrtc): nothing above
        half its ``maxplaybackrate``, at its ``maxaveragebitrate`` (unsaid: 12, 20 or 32
        kbit/s as the playback rate is at most 8 kHz, 16 kHz or more)."""
        rate = opus_parameter(answer_sdp, "maxplaybackrate")
        bitrate = opus_parameter(answer_sdp, "maxaveragebitrate")
        if bitrate is None:
            bitrate = 12000 if rate and rate <= 8000 else 20000 if rate and rate <= 16000 else 32000
        self._encoder = OpusEncoder(max(MIN_BITRATE, min(bitrate, 510000)))
        if rate is not None:
            self._encoder.limit_to_rate(rate)

    def play(self, wav: str) -> None:
        """Queue a mono 16-bit 48 kHz WAV (as testkit.speech.make_speech writes)."""
        with wave.open(wav) as src:
            assert src.getframerate() == 48000 and src.getnchannels() == 1
            samples = np.frombuffer(src.readframes(src.getnframes()), dtype=np.int16)
        self._pending = np.concatenate([self._pending, samples])

    @property
    def pending_seconds(self) -> float:
        """Seconds of queued WAV audio not yet sent."""
        return self._pending.size / 48000

    def hear(self, samples: np.ndarray, at: float) -> None:
        """Sound from the room (the loudspeaker's echo): 48 kHz float samples heard from
        time ``at`` on, mixed into what the microphone sends."""
        if self._start is None:
            return
        position = max(self._echo_at, round((at - self._start) * 48000))
        end = position + samples.size
        start = self._echo_at
        if end - start > self._echo.size:
            self._echo = np.concatenate(
                [self._echo, np.zeros(end - start - self._echo.size, np.float32)]
            )
        self._echo[position - start : end - start] += samples

    async def recv(self) -> Packet:
        pcm, silent = await self.next_pcm()
        packet = self._encoder.encode(pcm.tobytes(), self._pts, silent=silent)
        assert packet is not None  # a microphone sends every frame: no DTX
        return packet

    async def next_pcm(self) -> tuple[np.ndarray, bool]:
        """The next 20 ms (48 kHz int16), when it is due; and whether it is silent."""
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
            self._echo_at = 0
        else:
            self._pts += 960
            await asyncio.sleep(max(0.0, self._start + self._pts / 48000 - time.monotonic()))
        chunk = np.zeros(960, np.float32)
        take = min(960, self._pending.size)
        chunk[:take] = self._pending[:take]
        self._pending = self._pending[take:]
        echoed = self._mix_echo(chunk)
        pcm = np.clip(chunk, -32768, 32767).astype(np.int16)
        return pcm, take == 0 and not echoed

    def _mix_echo(self, chunk: np.ndarray) -> bool:
        skip = self._pts - self._echo_at  # echo samples already due before this frame
        if skip > 0:
            self._echo, self._echo_at = self._echo[skip:], self._pts
        part = self._echo[:960]
        chunk[: part.size] += part
        self._echo, self._echo_at = self._echo[960:], self._pts + 960
        return bool(part.size and np.any(part))
