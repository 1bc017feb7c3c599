"""The user's voice or the bot's echo? Judged frame by frame while the echo path is unknown.

WebRTC's AEC3, with no echo path to model yet, takes the user's voice for echo whenever
the bot is loud at that instant. A caller who asked a 1.8 s question as the call
connected, over the greeting, was heard 0.3-0.8 s late or not at all, and the STT got
the question's tail (issue 24). So until :class:`~pipeline.audio.echo.EchoPathDetector`
knows whether the bot's voice comes back, :class:`~pipeline.audio.echo.EchoCanceller` passes
AEC3's output only for frames that could be an echo of what was played, and the audio
as it came otherwise: the user is not damped for an echo that may not exist, and one
that does exist is still cancelled from its first syllable.

A frame could be an echo when, at some delay up to 0.5 s (see
:mod:`pipeline.audio.echo_envelopes`):

- the delay is not ruled out: the bot has not been loud at that delay for 100 ms while
  the microphone stayed 30 dB below it (an echo there would have been heard; the
  bot's level is taken as the quietest of the neighbouring 50 ms, so that a delay that
  jitters by a block or two is not ruled out at a syllable's edge). When every delay is
  ruled out there is no echo: :meth:`NearEndGate.no_echo` tells the canceller at once,
  where the detector's windows would take seconds while the user talks;
- and the microphone's envelope over the last 0.3 s follows the bot's at that delay
  (Pearson 0.9 or more).

Measured on generated speech (the hibari greeting, five questions in two voices, Opus
both ways, the user from 0.1 s before to 0.8 s after the bot): an echo from -20 to
-3 dB reads about 1.0 within 0.3 s of its onset and none reached the VAD; the VAD heard
97 % of each question (median) instead of 47 %. What stays ambiguous is a user who starts
exactly as long after one of the bot's onsets as an echo delay could be (from
``MIN_DELAY`` up: a user who starts with the bot is not taken for its echo): their first
0.2-0.3 s look just like an echo and still go through AEC3. A 0.2 s window let the echo
through twice in twelve runs; a lower bar (0.8) or a 0.5 s window damped more of the
user. An envelope steadier than 3 dB (a sustained vowel) correlates with nothing, echo
or not (an echo at -10 dB read 0.7 there): the previous view is kept through it.

Cost per 20 ms frame while the path is unknown, on a loaded 2-core machine: about 70 µs
to take the frame in (two envelope blocks; while the bot spoke in the last 0.5 s, the
contradictions at 51 delays) and, for a frame above the VAD's volume gate, 75 µs to
judge it (one ``correlate`` and running sums at 51 delays); AEC3 itself took 350 µs.
A few small numpy calls each, no per-block Python loop over delays: the path is unknown
for the first second or two of a call, twenty calls share two cores.
"""

from __future__ import annotations

import numpy as np

from pipeline.audio.echo_envelopes import BLOCK, LOUD_DB, RATE, History, levels

DELAYS = RATE // 2 // BLOCK  # echo delays considered: up to 0.5 s (50 blocks)
# No echo comes back sooner than this: the bot's 20 ms packet must reach the client, be
# played out of its jitter buffer, heard, captured in a 20 ms frame and sent back. A
# caller who starts talking the moment the greeting does otherwise "follows" it at a
# delay of 0-30 ms, and their first word was damped as its echo.
MIN_DELAY = 0.04
_JITTER = 2  # blocks either side of a delay that its echo may wander by
_RANGE_DB = 30.0  # the envelopes' range compared (see NearEndGate.echo_like)


class NearEndGate:
    """Fed every frame heard and what was played at the same moments (:meth:`push`);
    :meth:`echo_like` says whether the latest frame could be the bot's echo."""

    def __init__(
        self,
        window: float = 0.3,
        echo_like: float = 0.9,
        gate_db: float = -50.0,
        margin: float = 30.0,
        ruled_out_after: int = 10,
    ) -> None:
        """``window``: seconds of envelope correlated; ``echo_like``: the correlation at
        which the microphone counts as echo; ``gate_db``: frames quieter than this are
        not judged (the VAD's volume gate ignores them anyway); ``margin`` and
        ``ruled_out_after``: a delay is ruled out after that many blocks of the bot loud
        and the microphone ``margin`` dB below it."""
        self.blocks = round(window * 100)
        self.threshold = echo_like
        self.gate_db = gate_db
        self.margin = margin
        self.ruled_out_after = ruled_out_after
        self.steady_db = 3.0  # an envelope steadier than this (std, dB) is no evidence
        self._heard = History(self.blocks, before=None)
        self._played = History(self.blocks + DELAYS + _JITTER)
        self._contradicted = np.zeros(DELAYS + 1, np.int64)
        self._contradicted[: round(MIN_DELAY * RATE / BLOCK)] = ruled_out_after  # impossible delays
        self._future = np.full(2 * _JITTER, np.inf)
        self._since_loud = DELAYS + _JITTER + 1  # blocks since the bot was last loud
        self._near_rest = np.zeros(0, np.int16)  # samples short of a whole block
        self._far_rest = np.zeros(0, np.int16)
        self.loud = False  # the latest frame was above the gate (and so was judged)
        self._echo_like = True  # the latest judgement
        self.last_peak = 0.0

    def push(self, near: np.ndarray, far: np.ndarray | None) -> None:
        """``near``: samples heard; ``far``: what had been played at the same moments
        (None: nothing, the bot silent). Frames of any length: blocks carry over."""
        if far is None:
            far = np.zeros(near.size, np.int16)
        if self._near_rest.size:
            near = np.concatenate([self._near_rest, near])
            far = np.concatenate([self._far_rest, far])
        whole = near.size - near.size % BLOCK
        self._near_rest, self._far_rest = near[whole:], far[whole:]
        if whole == 0:
            return
        heard, played = levels(near[:whole]), levels(far[:whole])
        self._heard.extend(heard)
        self._played.extend(played)
        self._since_loud = 0 if played.max() > LOUD_DB else self._since_loud + heard.size
        if self._since_loud <= DELAYS + _JITTER:
            self._rule_out(heard)
        self.loud = bool(heard.max() >= self.gate_db)

    def echo_like(self) -> bool:
        """Whether the latest frame could be the bot's echo (AEC3's output should be used).
        A quiet frame counts as echo-like: nothing is lost by cancelling it."""
        if not self.loud:
            return True
        heard = self._heard.last()
        # Each envelope within 30 dB of its loudest: what the bot played far below its
        # peak echoes under the room's noise, where the microphone cannot follow it.
        heard = np.maximum(heard, heard.max() - _RANGE_DB)
        centred = heard - heard.mean()
        spread = float(centred @ centred)
        if spread < self.steady_db**2 * heard.size:
            return self._echo_like  # a sustained vowel, of the echo or the user's: no evidence
        played = self._played.last()[_JITTER:]
        played = np.maximum(played, played.max() - _RANGE_DB)
        r = _pearson(centred, spread, played)
        possible = self._contradicted < self.ruled_out_after
        self.last_peak = float(r[possible].max()) if possible.any() else 0.0
        self._echo_like = self.last_peak >= self.threshold
        return self._echo_like

    def no_echo(self) -> bool:
        """Every delay is ruled out: whatever the microphone hears is not the bot."""
        return bool((self._contradicted >= self.ruled_out_after).all())

    def _rule_out(self, heard: np.ndarray) -> None:
        """Count, at each delay, whether each new block of ``heard`` contradicts an echo
        there: the bot loud at that delay (the quietest of its neighbourhood, so that a
        delay that jitters is not ruled out at a syllable's edge), the microphone far
        below it."""
        k = heard.size
        played = self._played.last()[-(DELAYS + _JITTER + k) :]
        # lows[j]: the quietest of played[j .. j + 2 * _JITTER], the future read as +inf.
        padded = np.concatenate([played, self._future])
        lows = padded[: played.size]
        for shift in range(1, 2 * _JITTER + 1):
            lows = np.minimum(lows, padded[shift : shift + played.size])
        for i, h in enumerate(heard):
            # Block i's neighbourhood at delay d is centred on lows[i + DELAYS - d].
            at_delay = lows[i : i + DELAYS + 1][::-1]
            self._contradicted += (at_delay > LOUD_DB) & (h < at_delay - self.margin)


def _pearson(centred: np.ndarray, spread: float, played: np.ndarray) -> np.ndarray:
    """Pearson correlation of an envelope (``centred``: minus its mean; ``spread``: its
    sum of squares) with each stretch of ``played`` as long as it, at each delay: element
    ``d`` is the stretch ending ``d`` blocks before ``played`` does. 0 for a flat stretch
    (the bot silent at that delay: nothing to follow). Running sums, one ``correlate``."""
    n = centred.size
    sums = np.cumsum(played)
    squares = np.cumsum(played * played)
    window = sums[n - 1 :] - np.concatenate([[0.0], sums[:-n]])
    window_sq = squares[n - 1 :] - np.concatenate([[0.0], squares[:-n]])
    variation = window_sq - window * window / n
    # Σ c·(p - mean p) = Σ c·p, since c sums to 0.
    products = np.correlate(played, centred, "valid")
    # A stretch flatter than 0.1 dB explains nothing: 0, not a ratio of rounding errors.
    flat = variation <= 0.01 * n
    r = products / np.sqrt(spread * np.where(flat, 1.0, variation))
    r[flat] = 0.0
    return r[::-1]
