"""The paced outbound audio track: the bot's voice as 20 ms Opus frames on the wall clock
(inbound audio is :mod:`server.media.inbound_audio`)."""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from aiortc import (
    MediaStreamTrack,
)
from aiortc.mediastreams import MediaStreamError
from av import Packet
from loguru import logger

from pipeline.audio.resampling import StreamResampler
from pipeline.services.live_tts import heard_until
from server.media.opus import OpusEncoder

FRAME_SECONDS = 0.02
OUT_RATE = 48000
OUT_SAMPLES = int(OUT_RATE * FRAME_SECONDS)
OUT_FRAME_BYTES = OUT_SAMPLES * 2
OUT_BYTES_PER_SECOND = OUT_RATE * 2
# Past this much lateness the output clock is reset instead of bursting frames to catch up.
MAX_LATENESS = 0.1


class PlayoutListener(Protocol):
    """Told what the outbound track actually sends, as it sends it."""

    def playout_started(self) -> None: ...

    def playout_stopped(self) -> None: ...

    def segment_started(self, text: str) -> None: ...

    def segment_played(self, text: str) -> None: ...


_WORD = re.compile(r"\S+")


def word_starts(text: str) -> list[tuple[float, int]]:
    """Each word of ``text``: where it starts as a share of the text, which places it in
    the segment's audio (an estimate, for a voice that gives no word times), and where
    it ends in the text."""
    size = max(1, len(text))
    return [(word.start() / size, word.end()) for word in _WORD.finditer(text)]


@dataclass(slots=True)
class _Segment:
    start: int  # byte offsets in the stream of everything ever queued
    end: int
    text: str
    started: bool = False
    words: list[tuple[float, int]] | None = None  # word_starts(text), once playing
    told: int = 0  # characters of the text reported to on_progress


class PacedAudioTrack(MediaStreamTrack):
    """Outbound audio: 20 ms, 48 kHz mono frames paced against the wall clock.

    ``write`` queues PCM at any sample rate (resampled once to 48 kHz), optionally tagged
    with the text it speaks; ``recv`` sends silence whenever nothing is queued (with
    ``dtx``, as Opus DTX: after 200 ms, a packet every 400 ms, and the track sleeps
    through the frames it does not send until audio is written; :mod:`server.media.opus`,
    whose voice encoder ``limit_bitrate`` swaps for a far end that caps its bitrate.
    ``recv_pcm``, for transports that encode themselves, returns every frame); ``flush``
    drops everything queued at once, which is how barge-in silences the bot; ``pause``
    sends silence from the next frame on while keeping what is queued, and ``resume``
    goes on from the very sample where it paused (the user only said "mhm"). A pause is
    not a stop: the listener hears nothing of it, and ``playing`` stays true. A
    :class:`PlayoutListener` hears when audio starts and stops going out and when each
    tagged segment starts and finishes; on ``flush`` the segment cut short is reported
    with only the words that went out (by the voice's word times, where its text carries
    them: :class:`~pipeline.services.live_tts.SpokenText`). ``on_progress`` hears, as a
    segment plays, each time playout reaches another of its words. ``mark`` runs a
    callback once everything queued before it has been sent.

    Listeners, marks and ``on_frame_sent`` run inside aiortc's sender loop, which ends at
    the first exception (the bot would go silent for good): what they raise goes to
    ``on_error`` (a session counts it) and playout goes on.
    """

    kind = "audio"

    def __init__(self, listener: PlayoutListener | None = None, dtx: bool = True) -> None:
        super().__init__()
        self.listener = listener
        self._queue = bytearray()
        self._resampler = StreamResampler(OUT_RATE)
        self._silence = bytes(OUT_FRAME_BYTES)
        self._start: float | None = None
        self._pts = 0
        self._queued_total = 0  # bytes ever queued
        self._sent_total = 0  # bytes of queued audio ever sent
        self._segments: deque[_Segment] = deque()
        self._marks: deque[tuple[int, Callable[[], None]]] = deque()
        self._dtx = dtx
        self._encoder = OpusEncoder.for_voice(dtx)
        self._widest_rate = 0  # the highest sample rate written: the bandwidth to code
        self._wake = asyncio.Event()  # audio to play: ends a sleep through silence
        self.playing = False
        self.paused = False
        # Told each frame of queued audio as it is sent (e.g. to meter the bot's level).
        self.on_frame_sent: Callable[[bytes], None] | None = None
        # Told (segment text, its text up to and including the word now playing) as
        # playout reaches each word of a segment (e.g. for RTVI 2's spoken progress).
        self.on_progress: Callable[[str, str], None] | None = None
        # Told what a listener, a mark or on_frame_sent raised.
        self.on_error: Callable[[Exception], None] | None = None
        # Told when a pause or a flush cuts the bot off: a transport whose far end buffers
        # what it was sent (a phone provider) drops that buffer too.
        self.on_cut: Callable[[], None] | None = None
        # Bytes of queued audio the far end has played, where it says (a phone provider's
        # marks); None: what was sent is what was heard (WebRTC plays on arrival).
        self.played_position: Callable[[], int] | None = None
        # Told every frame recv_pcm returns, silence included (but the frames DTX does not
        # send: the recording fills in silence by its clock): the bot as the caller heard
        # it, for the call recording (server/storage/recording.py).
        self.on_frame_out: Callable[[bytes], None] | None = None

    @property
    def sent_position(self) -> int:
        """Bytes (48 kHz mono s16) of queued audio sent so far, flushed audio excluded."""
        return self._sent_total

    @property
    def queued_seconds(self) -> float:
        """Seconds of audio waiting to be played."""
        return len(self._queue) / (2 * OUT_RATE)

    def write(self, pcm: bytes | np.ndarray, sample_rate: int, text: str | None = None) -> None:
        """Queue mono s16 PCM (bytes or an int16 array) recorded at ``sample_rate``.

        ``text`` starts a new segment (the words this audio speaks); untagged audio
        written right after belongs to the same segment."""
        if sample_rate > self._widest_rate:
            self._widest_rate = sample_rate
            self._encoder.limit_to_rate(sample_rate)
        before = len(self._queue)
        self._queue += self._resampler.resample(pcm, sample_rate)
        added = len(self._queue) - before
        start = self._queued_total
        if text and added:
            self._segments.append(_Segment(start, start + added, text))
        elif added and self._segments and self._segments[-1].end == start:
            self._segments[-1].end += added  # untagged audio right after: same segment
        self._queued_total += added
        if added:
            self._wake.set()

    def limit_bitrate(self, max_bitrate: int) -> None:
        """The far end receives at most ``max_bitrate`` bit/s (its offer said so)."""
        self._encoder = OpusEncoder.for_voice(self._dtx, max_bitrate)
        if self._widest_rate:
            self._encoder.limit_to_rate(self._widest_rate)

    def mark(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once all audio queued so far has been sent (now, if none is)."""
        if not self._queue:
            callback()
        else:
            self._marks.append((self._queued_total, callback))

    def pause(self) -> None:
        """Send silence from the next frame on; what is queued waits (and may grow)."""
        if self.playing and not self.paused and self.on_cut is not None:
            self._tell(self.on_cut)
        self.paused = True

    def resume(self) -> None:
        """Go on sending the queued audio from where it paused."""
        self.paused = False
        self._wake.set()

    def stop(self) -> None:
        super().stop()
        self._wake.set()

    def flush(self) -> None:
        """Drop all queued audio (and end a pause); the next frame sent is silence. Pending
        marks are dropped too: what they waited for will never play."""
        if self.playing and not self.paused and self.on_cut is not None:
            self._tell(self.on_cut)
        self.paused = False
        listener = self.listener
        if listener is not None and self._segments and self._segments[0].started:
            cut = self._segments[0]
            heard = max(0, self._heard_position() - cut.start)
            until = heard_until(cut.text, heard / OUT_BYTES_PER_SECOND)
            if until is not None:  # the voice's own word times: the cut is exact
                spoken = cut.text[:until].strip()
            else:
                words = cut.text.split()
                spoken = " ".join(words[: round(len(words) * heard / max(1, cut.end - cut.start))])
            if spoken:
                self._tell(listener.segment_played, spoken)
        self._queued_total -= len(self._queue)
        self._queue.clear()
        self._resampler.reset()
        self._segments.clear()
        self._marks.clear()
        if self.playing:
            self.playing = False
            if listener is not None:
                self._tell(listener.playout_stopped)

    def _heard_position(self) -> int:
        """Bytes of queued audio the far end has played (sent ones, unless it says)."""
        if self.played_position is None:
            return self._sent_total
        return min(self._sent_total, self.played_position())

    def _progress(self, head: _Segment) -> None:
        """Tell ``on_progress`` of the last word of ``head`` whose start playout passed
        (one call per frame, however many words that frame passed)."""
        tell = self.on_progress
        if tell is None:
            return
        heard = self._heard_position() - head.start
        until = heard_until(head.text, heard / OUT_BYTES_PER_SECOND, started=True)
        if until is None:  # no word times from the voice: placed by their share of the text
            if head.words is None:
                head.words = word_starts(head.text)
            length = head.end - head.start
            until = 0
            for share, end in head.words:
                if share * length > heard:
                    break
                until = end
        if until > head.told:
            head.told = until
            self._tell(tell, head.text, head.text[:until])

    def _tell(self, callback: Callable[..., None], *args: object) -> None:
        try:
            callback(*args)
        except Exception as exc:
            if self.on_error is None:
                logger.opt(exception=exc).error("playout: a listener failed")
            else:
                self.on_error(exc)

    async def _idle(self, frames: int, start: float) -> float:
        """Sleep through up to ``frames`` frames of silence, until audio comes (or the
        track ends); move the clock (which started at ``start``) to the frame due next:
        for audio, now. Returns the time."""
        last = self._pts + frames * OUT_SAMPLES  # the frame after the silent ones
        self._wake.clear()
        try:
            # Not asyncio.wait_for: on 3.11 it returns, swallowing a cancellation, when the
            # event is set as the task is cancelled (gh-86296); the sender's loop then ran
            # on, and the session's close waited for it for ever.
            async with asyncio.timeout(start + last / OUT_RATE - time.monotonic()):
                await self._wake.wait()
            # Audio goes at once, not at the next 20 ms of the old grid (10 ms sooner on
            # average): after unsent frames a receiver keeps time by the timestamp alone.
            due = round((time.monotonic() - start) * OUT_RATE)
        except TimeoutError:
            due = -(-round((time.monotonic() - start) * OUT_RATE) // OUT_SAMPLES) * OUT_SAMPLES
        now = time.monotonic()
        self._pts = min(last, max(self._pts, due))
        if self.readyState != "live":
            raise MediaStreamError
        return now

    def _take_frame(self) -> bytes:
        if not self._queue:
            return self._silence
        chunk = bytes(self._queue[:OUT_FRAME_BYTES])
        del self._queue[:OUT_FRAME_BYTES]
        self._sent_total += len(chunk)
        if len(chunk) < OUT_FRAME_BYTES:
            chunk += self._silence[len(chunk) :]
        return chunk

    def _report(self, had_audio: bool) -> None:
        listener = self.listener
        if had_audio and not self.playing:
            self.playing = True
            if listener is not None:
                self._tell(listener.playout_started)
        segments = self._segments
        while segments:
            head = segments[0]
            if not head.started and head.start < self._sent_total:
                head.started = True
                if listener is not None:
                    self._tell(listener.segment_started, head.text)
            if head.end <= self._sent_total:
                segments.popleft()
                if listener is not None:
                    self._tell(listener.segment_played, head.text)
            else:
                if head.started:
                    self._progress(head)
                break
        marks = self._marks
        while marks and marks[0][0] <= self._sent_total:
            self._tell(marks.popleft()[1])
        if not had_audio and self.playing:
            self.playing = False
            if listener is not None:
                self._tell(listener.playout_stopped)

    async def recv(self) -> Packet:
        """The next Opus packet, when it is due (aiortc sends it as is): one per 20 ms,
        but for the frames of a silence that DTX does not send, which it sleeps through
        (a :meth:`write` or :meth:`resume` wakes it)."""
        encoder = self._encoder
        while True:
            pts = self._pts
            pcm = await self._due_pcm(encoder.unsent_ahead())
            if (skipped := (self._pts - pts) // OUT_SAMPLES - 1) > 0:
                encoder.skip(skipped)
            if self.on_frame_out is not None:
                self._tell(self.on_frame_out, pcm)
            packet = encoder.encode(pcm, self._pts, silent=pcm is self._silence)
            if packet is not None:
                return packet

    async def recv_pcm(self) -> bytes:
        """The next 20 ms of 48 kHz mono s16, when it is due (silence if nothing is queued)."""
        pcm = await self._due_pcm()
        if self.on_frame_out is not None:
            self._tell(self.on_frame_out, pcm)
        return pcm

    async def _due_pcm(self, skippable: int = 0) -> bytes:
        """The next frame when it is due; up to ``skippable`` silent frames may go by
        first, unsent, while there is nothing to play."""
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        else:
            self._pts += OUT_SAMPLES
            if skippable and (self.paused or not self._queue):
                now = await self._idle(skippable, self._start)
            wait = self._start + self._pts / OUT_RATE - now
            if wait > 0:
                await asyncio.sleep(wait)
            elif wait < -MAX_LATENESS:
                self._start -= wait
        if self.paused:
            return self._silence
        had_audio = bool(self._queue)
        chunk = self._take_frame()
        if had_audio or self.playing:
            self._report(had_audio)
            if had_audio and self.on_frame_sent is not None:
                self._tell(self.on_frame_sent, chunk)
        return chunk
