"""Noise suppression for whole test clips (:func:`suppress`): a clip through one fresh
:class:`~pipeline.audio.noise_suppression.NoiseSuppressor`, frame by frame as a call runs
it, its latency taken out so that the result lines up with the clip; and what it is tried
on (:func:`in_noise`): sentences in a call's steady pink noise.

A call's suppressor has heard the line for a while before anyone speaks, and RNNoise
takes a few hundred milliseconds to learn a noise; so it first hears ``warm`` seconds of
the clip's own opening (its first 0.3 s, mirrored back and forth so the joins do not
click), which in the evaluation sets is noise only (the transcriber's pre-roll)."""

from __future__ import annotations

import numpy as np

from pipeline.audio.noise_suppression import LATENCY, RATE, NoiseSuppressor
from pipeline.hearing.rnnoise import shared_rnnoise
from testkit.speech import pink
from testkit.stt_sentences import SENTENCES, speech
from testkit.vad_feed import FRAME

OPENING = 0.3  # seconds of the clip that are not speech


def warm_up(samples: np.ndarray, seconds: float) -> np.ndarray:
    """``seconds`` of the clip's opening, mirrored back and forth (int16)."""
    opening = samples[: round(OPENING * RATE)]
    if seconds <= 0 or opening.size == 0:
        return np.zeros(0, np.int16)
    both = np.concatenate([opening[::-1], opening])
    reps = -(-round(seconds * RATE) // both.size)
    return np.tile(both, reps)[-round(seconds * RATE) :]


def suppress(samples: np.ndarray, warm: float = 1.0) -> np.ndarray:
    """16 kHz int16 ``samples`` denoised, the same length and aligned with them."""
    lead = warm_up(samples, warm)
    delay = round(LATENCY * RATE)
    tail = np.zeros(delay + FRAME, np.int16)  # pushes the last samples out
    stream = np.concatenate([lead, samples.astype(np.int16), tail])
    suppressor = NoiseSuppressor(shared_rnnoise())
    try:
        out = b"".join(
            suppressor.process(stream[i : i + FRAME].tobytes())
            for i in range(0, stream.size - FRAME + 1, FRAME)
        )
    finally:
        suppressor.close()
    denoised = np.frombuffer(out, np.int16)
    start = lead.size + delay
    return denoised[start : start + samples.size].copy()


def in_noise(
    voice: str, count: int, snr_db: float = 10.0, gap: float = 1.5, seed: int = 7
) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """The first ``count`` evaluation sentences in ``voice``, ``gap`` seconds of silence
    before, between and after them, all under seeded pink noise ``snr_db`` below the
    sentences' power (16 kHz int16); and each sentence's (start, end) in seconds."""
    parts: list[np.ndarray] = []
    truth: list[tuple[float, float]] = []
    sentences = [speech(text, voice).astype(np.float64) for text in SENTENCES[:count]]
    position = 0
    for sentence in sentences:
        start = position + round(gap * RATE)
        parts += [np.zeros(start - position), sentence]
        truth.append((start / RATE, (start + sentence.size) / RATE))
        position = start + sentence.size
    parts.append(np.zeros(round(gap * RATE)))
    clean = np.concatenate(parts)
    power = float(np.mean(np.concatenate(sentences) ** 2))
    noise = pink(np.random.default_rng(seed), clean.size)
    noise *= np.sqrt(power / 10 ** (snr_db / 10) / np.mean(noise**2))
    return np.clip(np.round(clean + noise), -32768, 32767).astype(np.int16), truth
