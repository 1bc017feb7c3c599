"""The bot's own voice in the user's microphone: found by correlation, cancelled by AEC3.

A speakerphone, or a client without echo cancellation, sends the bot's voice back about
150 ms later and 10 dB down; to the VAD it is speech, so the bot would interrupt itself.
The server knows what it played sample for sample, and uses it two ways:

- :class:`EchoPathDetector` finds out whether the bot's voice comes back at all: the
  correlation of the microphone's energy envelope with that of what was played, over
  delays up to 0.5 s, while the bot speaks. Measured on the bot's voice: an echo from
  -30 dB up (-10 dB through Opus over WebRTC) correlates at 0.8-0.99 at its true delay,
  window after window; no echo stays below 0.3 but for chance peaks at wandering delays.
  Only the blocks where the bot was audible at a delay count for that delay (a caller
  who began 0.3 s after the bot otherwise "was" an echo at 0.3 s, from one onset). A
  caller who talks over the bot keeps the peak in between for as long as they talk; the
  gate below rules the echo out sooner, from the bot loud while the room stayed quiet.
- WebRTC's AEC3 (``pywebrtc-audio``: the echo canceller Chrome runs, Apache-2.0) removes
  the echo. On the bot's voice echoed at -20 to -3 dB, 150 to 300 ms, the VAD fired 8
  times on the raw echo and never after AEC3, from its first word. But when it has no
  echo path to model, this AEC3 treats the user's voice as echo whenever the bot is loud
  at that instant: a "mhm" came out 46 dB down, a barge-in 10 dB down, and a question
  asked over the greeting reached the VAD late and in pieces (answered whole in 0 to 3
  of 20 calls of ``bench/greeting_overlap.py``). A linear canceller (speex) is transparent
  then, but lets the first second of echo through and needs its filter to cover the
  delay.

So :class:`EchoCanceller` passes AEC3's output once an echo path is present; while it is
not yet known (the first second or two the bot speaks) only for frames that look like
an echo of what was played (:class:`~pipeline.audio.near_end.NearEndGate`), turned down 20 dB
more when loud (AEC3 lets a residue through until it has converged), and the audio as
it came otherwise; and untouched once the detector has seen the bot speak with nothing
coming back: the common case of a browser cancelling its own echo. AEC3 then stops
running (it costs about 1 % of a core); the detector goes on, and an echo appearing
later switches AEC3 back on. While the path is unknown AEC3 still runs on every frame,
so that its filter has converged if an echo turns out to be there.

That is bounded whatever the bot sounds like: after ``QUIET_DECIDE`` s of the bot's audio
with the room quieter than ``LOUD_DB`` throughout (no block an echo over the VAD's volume
gate could make), the echo is ruled out. The detector's own rules need a voice whose
envelope moves and a bot loud at every delay: a steady tone, or a bot quieter than the
gate's bar, kept the path unknown, and AEC3 running on every frame, for the whole call.
"""

from __future__ import annotations

from enum import Enum

import numpy as np
from pywebrtc_audio import EchoCanceller as AEC3

from pipeline.audio.echo_envelopes import (
    AUDIBLE_DB,
    BLOCK,
    LOUD_DB,
    correlations,
    delayed,
    levels,
)
from pipeline.audio.near_end import NearEndGate
from pipeline.audio.resampling import Decimator

RATE = 16000
MAX_DELAY = RATE // 2  # echo delays searched: up to 0.5 s
WINDOW = 2 * RATE  # one check correlates 2 s of microphone audio
MIN_WINDOW = RATE  # or at least 1 s, at the start of a call
# Checked every 0.5 s of audio while it is not known whether there is an echo, every
# 2 s once it is (an echo path rarely changes within a call).
STEP_DECIDING = RATE // 2
STEP_DECIDED = 2 * RATE
# Reference waiting beyond this (the inbound stream stalled) is dropped, oldest first.
MAX_QUEUED = RATE // 4
# The reference is paired with what is heard once this much of it is queued (or its
# first sample has waited as long): see :class:`_Reference`.
PRIME = RATE // 25
# A gap in what the track plays longer than this starts a new stretch of the bot's voice.
GAP = 0.1
# While the path is unknown, AEC3's output for a loud frame judged an echo is turned down
# this much more: the bot's voice cut off after a second by a caller, its answer echoed
# 2 s later set the VAD off in 7 of 30 runs, 1 of 30 so (5 of 30 before the gate).
RESIDUE_GAIN = 0.1
# Seconds of the bot's audio, the room quiet throughout, that rule an echo out (see the
# module's docstring): the detector finds a real echo within a second or two.
QUIET_DECIDE = 2.0


class EchoPath(Enum):
    UNKNOWN = "unknown"
    PRESENT = "present"
    ABSENT = "absent"


class EchoPathDetector:
    """Whether the played audio comes back in the microphone, from aligned histories.

    It correlates 10 ms energy envelopes (log scale) of the microphone with those of what
    was played, over delays up to ``MAX_DELAY``. Envelopes, not waveforms: a low-bitrate
    codec on the way (Opus at 32 kbit/s) scrambles the phase, so a waveform correlation
    (GCC-PHAT) of a real echo peaked at 0.1-0.2, its envelope at 0.9. ``present`` takes
    two windows in a row peaking at ``present_peak`` or more at the same delay (a voice
    like the bot's, saying other things, may reach it once, never at a steady delay);
    ``absent`` takes ``absent_windows`` in a row below ``absent_peak`` while the bot was
    audible (or :meth:`rule_out`). In between the view is kept.
    """

    def __init__(
        self, present_peak: float = 0.6, absent_peak: float = 0.3, absent_windows: int = 2
    ) -> None:
        self.present_peak = present_peak
        self.absent_peak = absent_peak
        self.absent_windows = absent_windows
        self.state = EchoPath.UNKNOWN
        self.delay: float | None = None  # seconds, when present
        self.last_peak = 0.0
        self._last_lag: int | None = None  # of the previous strong peak
        self._quiet_windows = 0

    def check(self, mic: np.ndarray, ref: np.ndarray) -> EchoPath:
        """``mic``: the last samples heard (up to ``WINDOW``); ``ref``: the samples played
        that could be in them, ``MAX_DELAY`` more (``ref[MAX_DELAY:]`` went out as
        ``mic`` came in)."""
        heard, played = levels(mic), levels(ref)
        span = MAX_DELAY // BLOCK
        if np.mean(played[span:] > AUDIBLE_DB) < 0.3:
            return self.state  # the bot said little: no evidence either way
        peak, lag = _best_lag(heard, played)
        self.last_peak = peak
        steady = self._last_lag is not None and abs(lag - self._last_lag) <= 2
        self._last_lag = lag if peak >= self.present_peak and lag < span else None
        if self._last_lag is not None and steady:
            self.state, self.delay, self._quiet_windows = EchoPath.PRESENT, lag * 0.01, 0
        elif peak < self.absent_peak:
            self._quiet_windows += 1
            if self._quiet_windows >= self.absent_windows:
                self.state, self.delay = EchoPath.ABSENT, None
        else:
            self._quiet_windows = 0
        return self.state

    def rule_out(self) -> None:
        """No echo at any delay (:meth:`pipeline.audio.near_end.NearEndGate.no_echo`)."""
        if self.state is EchoPath.UNKNOWN:
            self.state, self.delay, self._quiet_windows = EchoPath.ABSENT, None, 0


_MIN_AUDIBLE = 30  # blocks of the bot audible at a delay for it to count (0.3 s)


def _best_lag(heard: np.ndarray, played: np.ndarray) -> tuple[float, int]:
    """The highest correlation of ``heard`` with ``played`` at a delay of 0 to
    ``MAX_DELAY`` (``played`` starts ``MAX_DELAY`` before ``heard``), over the blocks
    where the bot was audible at that delay, and its delay in blocks."""
    r = correlations(heard, delayed(heard, played), _MIN_AUDIBLE)
    lag = int(np.argmax(r))
    return float(r[lag]), lag


class _Ring:
    """The last ``size`` samples written, without allocating per write."""

    def __init__(self, size: int) -> None:
        self._data = np.zeros(size, np.int16)
        self._zeros = np.zeros(RATE // 10, np.int16)
        self._at = 0  # where the next sample goes

    def write(self, samples: np.ndarray | None, silence: int = 0) -> None:
        """Append ``samples``, or ``silence`` zeros when they are None."""
        if samples is None:
            samples = (
                self._zeros[:silence]
                if silence <= self._zeros.size
                else np.zeros(silence, np.int16)
            )
        size = self._data.size
        samples = samples[-size:]
        first = min(samples.size, size - self._at)
        self._data[self._at : self._at + first] = samples[:first]
        self._data[: samples.size - first] = samples[first:]
        self._at = (self._at + samples.size) % size

    def read(self) -> np.ndarray:
        """All of it, oldest first (a copy)."""
        return np.concatenate([self._data[self._at :], self._data[: self._at]])


class _Reference:
    """What was played and not yet paired with what was heard: a small jitter buffer.

    The track's sends and the microphone's packets are two 20 ms clocks. Paired as
    they came, the one frame queued was often not there yet at the next packet: a 20 ms
    hole of silence went into the reference mid-word, and every later sample of the
    bot's voice sat a frame later against its echo. At the bot's first words, while the
    echo path is unknown, the near-end gate then found the echo following at no single
    delay and passed it raw (in 7 of 12 calls of ``tests/test_interruptions_webrtc.py``'s
    own-echo test, the echo 10 dB down), and the VAD heard the bot's own voice in 11 of
    52. Starting each stretch of the bot's voice with ``PRIME`` queued leaves a frame of
    slack: 0 of 10 and 0 of 24.
    """

    def __init__(self) -> None:
        self._queue = np.zeros(0, np.int16)
        self._primed = False
        self._since = float("-inf")  # when this stretch of the bot's voice began
        self._last = float("-inf")  # when a frame was last played

    @property
    def size(self) -> int:
        return self._queue.size

    def add(self, samples: np.ndarray, t: float) -> None:
        if t - self._last > GAP:  # the bot's voice starts again: wait for PRIME
            self._primed, self._since = False, t
        self._last = t
        self._queue = np.concatenate([self._queue, samples])[-MAX_QUEUED:]

    def take(self, n: int, t: float) -> np.ndarray:
        """The ``n`` samples played as the ``n`` just heard were: silence before the
        buffer is primed, and where it runs dry (the bot stopped, or a frame is late: a
        hole, after which the slack is a frame more)."""
        if not self._primed:
            if self._queue.size < PRIME and t - self._since < PRIME / RATE:
                return np.zeros(n, np.int16)
            self._primed = True
        far, self._queue = self._queue[:n], self._queue[n:]
        if far.size < n:
            far = np.concatenate([far, np.zeros(n - far.size, np.int16)])
        return far


class EchoCanceller:
    """One session's echo handling: :meth:`played` the outbound audio, :meth:`process`
    the inbound audio (each in the order it goes out and comes in)."""

    def __init__(self, tail: float = 1.0, detector: EchoPathDetector | None = None) -> None:
        self.tail = tail
        self.detector = detector or EchoPathDetector()
        self._aec: AEC3 | None = None
        self._decimators: dict[int, Decimator] = {}
        self._far = _Reference()
        self._active_until = float("-inf")
        # What was heard and what had been played at the same moments, for the detector.
        self._heard = _Ring(WINDOW)
        self._played = _Ring(MAX_DELAY + WINDOW)
        self._since_check = 0
        self._seen = 0  # samples heard since the start
        # While the path is unknown: which frames sound like an echo (AEC3's output).
        self.gate: NearEndGate | None = NearEndGate()
        self.cancelled = 0  # inbound frames that went through AEC3
        self.passed = 0  # of those, frames passed as they came: not like an echo
        self._quiet = 0  # samples of the bot's audio heard in a quiet room, path unknown

    @property
    def state(self) -> EchoPath:
        return self.detector.state

    def played(self, pcm: bytes, sample_rate: int, t: float) -> None:
        """Audio the track just sent (mono s16 at ``sample_rate``), at time ``t``."""
        samples = np.frombuffer(pcm, dtype=np.int16)
        if sample_rate != RATE:
            if sample_rate % RATE:
                raise ValueError(f"the played audio's rate must be a multiple of {RATE}")
            decimate = self._decimators.get(sample_rate)
            if decimate is None:
                decimate = self._decimators[sample_rate] = Decimator(sample_rate // RATE)
            samples = decimate(samples)
        self._far.add(samples, t)
        self._active_until = t + self.tail

    def process(self, pcm: bytes, t: float) -> bytes:
        """Inbound audio (16 kHz mono s16) arriving at ``t``, the bot's echo removed."""
        near = np.frombuffer(pcm, dtype=np.int16)
        if t > self._active_until and self._far.size == 0:
            # The bot has been silent long enough: no echo can come. The histories go on
            # (the detector needs them continuous), the audio passes as it is.
            self._remember(near, None)
            return pcm
        far = self._far.take(near.size, t)  # silence once the bot fell silent: its echo
        self._remember(near, far)  # may still be on the way
        if self.gate is not None and self.gate.no_echo():
            self.detector.rule_out()  # the bot was loud at every delay, the room quiet
        if self.detector.state is EchoPath.UNKNOWN:
            self._quiet = (
                0 if levels(near).max(initial=-200.0) > LOUD_DB else self._quiet + near.size
            )
            if self._quiet >= QUIET_DECIDE * RATE:
                self.detector.rule_out()  # no echo that could reach the VAD came back
        state = self.detector.state
        if state is EchoPath.ABSENT:
            self._aec = None
            return pcm
        if self._aec is None:
            self._aec = AEC3(sample_rate=RATE)
        self.cancelled += 1
        cleaned = self._aec.process(near, far)  # every frame: AEC3 must adapt
        if state is EchoPath.UNKNOWN and self.gate is not None:
            if not self.gate.echo_like():
                self.passed += 1
                return pcm
            if self.gate.loud:
                # A loud frame that follows the bot's envelope is its echo, and AEC3 lets a
                # residue of it through until it has converged: 20 dB more off.
                cleaned = (cleaned * RESIDUE_GAIN).astype(np.int16)
        return cleaned.tobytes()

    def _remember(self, near: np.ndarray, far: np.ndarray | None) -> None:
        self._heard.write(near)
        self._played.write(far, near.size)
        if self.gate is not None:
            if self.detector.state is EchoPath.UNKNOWN:
                self.gate.push(near, far)
            else:
                self.gate = None  # decided: an echo path rarely appears from nowhere
        self._seen += near.size
        self._since_check += near.size
        deciding = self.detector.state is EchoPath.UNKNOWN
        valid = min(self._seen, WINDOW)  # what was really heard (the start of a call)
        if valid < MIN_WINDOW or self._since_check < (STEP_DECIDING if deciding else STEP_DECIDED):
            return
        self._since_check = 0
        heard = self._heard.read()[-valid:]
        played = self._played.read()[-(valid + MAX_DELAY) :]
        if self.detector.check(heard, played) is EchoPath.ABSENT:
            self._aec = None  # not needed; a new echo path starts a new one
