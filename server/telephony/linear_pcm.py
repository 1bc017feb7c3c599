"""Linear 16-bit PCM on the wire (Exotel, Vonage): the provider's rate to and from our
16 kHz mono s16, through :class:`~pipeline.audio.resampling.StreamResampler` (a context
kept per direction of a stream, so chunk edges are seamless).

Both providers want what we send in whole frames (Exotel: multiples of 320 bytes; Vonage:
20 ms messages), so :class:`PcmEncoder` carries a partial frame over to the next call.
"""

from __future__ import annotations

from pipeline.audio.resampling import StreamResampler
from server.telephony.stream_events import StreamProtocolError

WIDE = 16000


class PcmDecoder:
    """s16 little-endian mono bytes at ``rate`` → 16 kHz mono s16 bytes."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._up = StreamResampler(WIDE)

    def decode(self, data: bytes) -> bytes:
        if len(data) % 2:
            raise StreamProtocolError(f"{len(data)} bytes of audio: not 16-bit samples")
        return self._up.resample(data, self.rate)


class PcmEncoder:
    """Mono s16 bytes at any rate → s16 at ``rate``, in whole frames of ``frame`` bytes."""

    def __init__(self, rate: int, frame: int) -> None:
        self.rate = rate
        self._frame = frame
        self._down = StreamResampler(rate)
        self._carry = b""

    def encode(self, pcm: bytes, sample_rate: int) -> bytes:
        data = self._carry + self._down.resample(pcm, sample_rate)
        whole = len(data) - len(data) % self._frame
        if whole == 0:
            # Less than a frame (the resampler holds a few samples back at the start):
            # silence in front makes it one, rather than a short frame the provider would
            # play with a gap after it.
            self._carry = b""
            return bytes(self._frame - len(data)) + data if data else b""
        self._carry = data[whole:]
        return data[:whole]
