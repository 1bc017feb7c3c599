"""Changing the sample rate of mono audio: the one place it is done.

- :class:`StreamResampler`: a stream of chunks at any rate to one rate, through FFmpeg's
  libswresample (PyAV's ``AudioResampler``), which keeps a few samples between chunks so
  that chunk edges are seamless. Inbound audio (48 kHz decoded → 16 kHz) and the
  outbound track (the TTS's rate → 48 kHz) use it.
- :func:`resample`: a whole clip at once (flushed: nothing is held back), the same
  filter; for audio that arrives whole (an STT request at another rate, test clips).
- :class:`Decimator`: integer downsampling of a stream with a short windowed-sinc
  low-pass, for the echo canceller's reference (48 kHz → 16 kHz). Its stopband (~40 dB)
  is plenty for that, and per 20 ms frame it costs a fifth of a round trip through PyAV
  frames; that path runs on every outbound frame.
- :class:`Interpolator`: its mirror, integer upsampling of a stream (16 kHz → 48 kHz for
  the noise suppressor, :mod:`pipeline.audio.noise_suppression`): exactly ``factor``
  samples out per sample in, so a stream keeps a fixed delay, which PyAV's does not.
"""

from __future__ import annotations

import av
import numpy as np

_FORMATS = {np.dtype(np.int16): "s16", np.dtype(np.float32): "flt"}


def _frame(samples: np.ndarray, rate: int) -> av.AudioFrame:
    """Mono int16 or float32 samples as a packed PyAV frame at ``rate``."""
    layout = _FORMATS[samples.dtype]
    frame = av.AudioFrame.from_ndarray(
        np.ascontiguousarray(samples).reshape(1, -1), format=layout, layout="mono"
    )
    frame.sample_rate = rate
    return frame


def _samples(frames: list[av.AudioFrame], dtype: np.dtype) -> np.ndarray:
    """The frames' samples, one array (a frame's buffer may be padded past its samples)."""
    parts = [f.to_ndarray().reshape(-1)[: f.samples] for f in frames]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


class StreamResampler:
    """Mono s16 chunks at any rate → ``rate``, in order, with no seam between chunks.

    One libswresample context per input rate (a TTS and a greeting may differ), made on
    first use; :meth:`reset` drops them with the samples they hold (after a flush, the
    tail of cut-off speech must not leak into what comes next)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._by_rate: dict[int, av.AudioResampler] = {}

    def resample_frame(self, frame: av.AudioFrame) -> list[bytes]:
        """A decoded frame's audio at :attr:`rate`: zero or more s16 chunks (the
        resampler may hold a few samples back until the next frame)."""
        resampler = self._by_rate.get(frame.sample_rate)
        if resampler is None:
            resampler = av.AudioResampler(format="s16", layout="mono", rate=self.rate)
            self._by_rate[frame.sample_rate] = resampler
        return [
            bytes(memoryview(out.planes[0])[: out.samples * 2])
            for out in resampler.resample(frame)
            if out.samples
        ]

    def resample(self, pcm: bytes | np.ndarray, sample_rate: int) -> bytes:
        """Mono s16 PCM (bytes or an int16 array) recorded at ``sample_rate``, at
        :attr:`rate`; unchanged when the rates are equal."""
        if sample_rate == self.rate:
            return pcm.tobytes() if isinstance(pcm, np.ndarray) else bytes(pcm)
        samples = pcm if isinstance(pcm, np.ndarray) else np.frombuffer(pcm, dtype=np.int16)
        if samples.size == 0:
            return b""
        return b"".join(self.resample_frame(_frame(samples, sample_rate)))

    def reset(self) -> None:
        """Forget what the resamplers hold."""
        self._by_rate.clear()


def resample(samples: np.ndarray, rate: int, to_rate: int) -> np.ndarray:
    """A whole mono clip (int16 or float32) from ``rate`` to ``to_rate``, same type."""
    samples = samples.reshape(-1)
    if rate == to_rate or samples.size == 0:
        return samples
    layout = _FORMATS[samples.dtype]
    resampler = av.AudioResampler(format=layout, layout="mono", rate=to_rate)
    out = [*resampler.resample(_frame(samples, rate)), *resampler.resample(None)]
    return _samples(out, samples.dtype)


class Decimator:
    """Integer downsampling of an int16 stream by ``factor``: a windowed-sinc low-pass,
    then every ``factor``-th sample (see the module docstring for why not PyAV)."""

    def __init__(self, factor: int, taps: int = 24) -> None:
        n = np.arange(taps) - (taps - 1) / 2
        cutoff = 0.45 / factor  # of the input rate: just below the output's Nyquist
        h = np.sinc(2 * cutoff * n) * np.hamming(taps)
        self._h = (h / h.sum()).astype(np.float32)
        self._factor = factor
        self._state = np.zeros(taps - 1, np.float32)
        self._phase = 0  # where, in the next input, the next output sample falls

    def __call__(self, samples: np.ndarray) -> np.ndarray:
        buffer = np.concatenate([self._state, samples.astype(np.float32)])
        filtered = np.convolve(buffer, self._h, "valid")
        self._state = buffer[-self._state.size :]
        out = filtered[self._phase :: self._factor]
        self._phase = (self._phase - samples.size) % self._factor
        return np.clip(np.rint(out), -32768, 32767).astype(np.int16)


class Interpolator:
    """Integer upsampling of an int16 stream by ``factor`` to float32: zeros stuffed
    between the samples, then a windowed-sinc low-pass below the input's Nyquist, run as
    ``factor`` short polyphase filters (the stuffed zeros are never multiplied)."""

    def __init__(self, factor: int, taps: int = 48) -> None:
        taps -= taps % factor  # whole phases
        n = np.arange(taps) - (taps - 1) / 2
        cutoff = 0.45 / factor  # of the output rate: just below the input's Nyquist
        h = np.sinc(2 * cutoff * n) * np.hamming(taps)
        h *= factor / h.sum()  # the stuffed zeros cost 1/factor of the level
        self._phases = [h[p::factor].astype(np.float32) for p in range(factor)]
        self._factor = factor
        self._state = np.zeros(taps // factor - 1, np.float32)
        self.delay = (taps - 1) / 2  # output samples

    def __call__(self, samples: np.ndarray) -> np.ndarray:
        buffer = np.concatenate([self._state, samples.astype(np.float32)])
        self._state = buffer[buffer.size - self._state.size :]
        out = np.empty(samples.size * self._factor, np.float32)
        for p, phase in enumerate(self._phases):
            out[p :: self._factor] = np.convolve(buffer, phase, "valid")
        return out
