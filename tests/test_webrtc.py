"""The paced outbound track, with real av frames and real Opus packets."""

from __future__ import annotations

import asyncio
import fractions
import time

import numpy as np
from aiortc.mediastreams import MediaStreamError
from av import CodecContext, Packet

from pipeline.services.live_tts import SpokenText, heard_until
from server.media.opus import DTX_UPDATE_FRAMES, SETTLE_FRAMES
from server.media.outbound_track import OUT_FRAME_BYTES, OUT_RATE, OUT_SAMPLES, PacedAudioTrack


def tone(rate: int, seconds: float, freq: float = 440.0, amp: int = 8000) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def rms(pcm: bytes) -> float:
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32)
    return float(np.sqrt(np.mean(samples * samples)))


def decoded_rms(packets: list[Packet]) -> list[float]:
    """Decode Opus packets as a browser would (48 kHz stereo) and measure each."""
    decoder = CodecContext.create("libopus", "r")
    decoder.format, decoder.layout, decoder.sample_rate = "s16", "stereo", OUT_RATE
    levels = []
    for packet in packets:
        (frame,) = decoder.decode(Packet(bytes(packet)))
        assert frame.samples == OUT_SAMPLES
        samples = frame.to_ndarray().astype(np.float32)
        levels.append(float(np.sqrt(np.mean(samples * samples))))
    return levels


async def test_idle_track_sends_paced_silence() -> None:
    track = PacedAudioTrack()
    started = time.monotonic()
    frames = [await track.recv_pcm() for _ in range(10)]
    elapsed = time.monotonic() - started
    assert all(len(f) == OUT_FRAME_BYTES and rms(f) == 0 for f in frames)
    assert elapsed >= 0.17, "frames must be paced against the clock, not sent in a burst"


async def test_recv_sends_opus_packets_that_decode_to_what_was_written() -> None:
    track = PacedAudioTrack()
    silence = [await track.recv() for _ in range(SETTLE_FRAMES)]
    assert [p.pts for p in silence] == [i * OUT_SAMPLES for i in range(SETTLE_FRAMES)]
    assert all(p.time_base == fractions.Fraction(1, OUT_RATE) for p in silence)
    track.write(tone(OUT_RATE, 0.2, amp=8000).tobytes(), OUT_RATE)
    speech = [await track.recv() for _ in range(10)]
    assert speech[0].pts == SETTLE_FRAMES * OUT_SAMPLES, "no frame skipped before speech"
    after = [await track.recv() for _ in range(SETTLE_FRAMES)]
    levels = decoded_rms(silence + speech + after)
    assert max(levels[:SETTLE_FRAMES]) < 50
    # Opus looks ahead 6.5 ms, so the tone shows from the first frame and fades after.
    assert min(levels[SETTLE_FRAMES + 1 : SETTLE_FRAMES + 10]) > 0.6 * 8000 / np.sqrt(2)
    assert max(levels[-5:]) < 50


async def test_silence_goes_as_dtx_and_speech_wakes_the_track() -> None:
    track = PacedAudioTrack()
    heard: list[bytes] = []
    track.on_frame_out = heard.append
    started = time.monotonic()
    packets = [await track.recv() for _ in range(SETTLE_FRAMES + 3)]
    elapsed = time.monotonic() - started
    frames = [p.pts // OUT_SAMPLES for p in packets]
    sizes = [len(bytes(p)) for p in packets]
    # As a browser sends Opus DTX: 200 ms of silence, one byte (the TOC: "DTX from here"),
    # then a silence frame and the byte again every 400 ms, and nothing in between.
    n = SETTLE_FRAMES
    assert frames == [*range(n + 1), n + DTX_UPDATE_FRAMES - 1, n + DTX_UPDATE_FRAMES]
    assert sizes[n] == 1 and sizes[n + 2] == 1 and sizes[n + 1] > 2
    assert bytes(packets[n + 1]) == bytes(packets[n - 1]), "the settled silence, not re-encoded"
    assert elapsed >= (n + DTX_UPDATE_FRAMES - 1) * 0.02, "the skipped frames still take their time"
    assert len(heard) == len(packets), "told only the frames it woke for"
    # Asleep in the silence, it wakes for audio and sends it at once, off the 20 ms grid
    # of the frames before (its timestamp is the wall time since the start). Written 3 ms
    # after a grid point, it used to wait 17 ms for the next.
    asleep = asyncio.ensure_future(track.recv())
    await asyncio.sleep(0.1)
    assert not asleep.done()
    await asyncio.sleep(0.023 - (time.monotonic() - started) % 0.02)
    track.write(tone(OUT_RATE, 0.1).tobytes(), OUT_RATE)
    written = time.monotonic()
    packet = await asyncio.wait_for(asleep, 0.2)
    assert time.monotonic() - written < 0.04
    assert packet.pts / OUT_RATE - (written - started) < 0.012
    assert packet.pts % OUT_SAMPLES != 0
    assert len(bytes(packet)) > 20
    levels = decoded_rms([*packets, packet])
    assert max(levels[:-1]) < 50 and levels[-1] > 1000, "the DTX bytes decode to silence"


async def test_a_paused_track_sleeps_in_dtx_and_resume_wakes_it() -> None:
    track = PacedAudioTrack()
    track.write(tone(OUT_RATE, 2.0).tobytes(), OUT_RATE)
    await track.recv()
    track.pause()
    for _ in range(SETTLE_FRAMES + 1):
        await track.recv()
    asleep = asyncio.ensure_future(track.recv())
    await asyncio.sleep(0.1)
    assert not asleep.done(), "a pause is silence: DTX"
    track.resume()
    packet = await asyncio.wait_for(asleep, 0.05)
    assert len(bytes(packet)) > 20, "the queued speech goes on"
    track.stop()
    try:
        await asyncio.wait_for(track.recv(), 1.0)
    except MediaStreamError:
        return
    raise AssertionError("a stopped track ends its recv")


async def test_a_sender_cancelled_as_audio_wakes_it_ends() -> None:
    """The sender's loop is cancelled at a session's close; a write that wakes the sleeping
    track in the same moment must not swallow that cancellation (asyncio.wait_for on 3.11
    did, gh-86296: the loop went on and the close waited for it for ever)."""

    async def sender() -> None:
        while True:
            await track.recv()

    track = PacedAudioTrack()
    for _ in range(SETTLE_FRAMES + 1):
        await track.recv()
    sending = asyncio.ensure_future(sender())
    await asyncio.sleep(0.05)  # asleep in the DTX silence
    track.write(tone(OUT_RATE, 0.5).tobytes(), OUT_RATE)
    sending.cancel()
    done, _ = await asyncio.wait([sending], timeout=1.0)
    assert done and sending.cancelled(), "the cancellation was swallowed"


async def test_stop_ends_a_sleep_in_dtx() -> None:
    track = PacedAudioTrack()
    for _ in range(SETTLE_FRAMES + 1):
        await track.recv()
    asleep = asyncio.ensure_future(track.recv())
    await asyncio.sleep(0.05)
    stopped = time.monotonic()
    track.stop()
    try:
        await asyncio.wait_for(asleep, 1.0)
    except MediaStreamError:
        assert time.monotonic() - stopped < 0.1, "at once, not at the next update"
        return
    raise AssertionError("recv on a stopped track must raise MediaStreamError")


async def test_written_audio_is_resampled_to_48k_and_played_then_silence() -> None:
    track = PacedAudioTrack()
    track.write(tone(24000, 0.1), 24000)  # 100 ms at 24 kHz, as the embedded TTS makes
    assert abs(track.queued_seconds - 0.1) < 0.011
    levels = [rms(await track.recv_pcm()) for _ in range(8)]
    loud = [level > 1000 for level in levels]
    assert loud[:4] == [True] * 4
    assert loud[-2:] == [False, False]
    assert track.queued_seconds == 0


async def test_flush_silences_at_once() -> None:
    track = PacedAudioTrack()
    track.write(tone(OUT_RATE, 1.0).tobytes(), OUT_RATE)
    assert rms(await track.recv_pcm()) > 1000
    track.flush()
    assert track.queued_seconds == 0
    assert rms(await track.recv_pcm()) == 0


async def test_stopped_track_raises() -> None:
    track = PacedAudioTrack()
    track.stop()
    try:
        await track.recv()
    except MediaStreamError:
        return
    raise AssertionError("recv on a stopped track must raise MediaStreamError")


def test_out_frame_size() -> None:
    assert OUT_FRAME_BYTES == 1920


class Playout:
    """Records what a PacedAudioTrack reports."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []

    def playout_started(self) -> None:
        self.log.append(("started", ""))

    def playout_stopped(self) -> None:
        self.log.append(("stopped", ""))

    def segment_started(self, text: str) -> None:
        self.log.append(("segment", text))

    def segment_played(self, text: str) -> None:
        self.log.append(("played", text))


async def test_playout_reports_segments_in_order_and_marks_fire_after_them() -> None:
    playout = Playout()
    track = PacedAudioTrack(playout)
    track.write(tone(24000, 0.04), 24000, text="Hello there.")
    track.write(tone(24000, 0.04), 24000, text="How are you?")
    marked: list[int] = []
    track.mark(lambda: marked.append(len(playout.log)))
    for _ in range(6):
        await track.recv()
    assert playout.log == [
        ("started", ""),
        ("segment", "Hello there."),
        ("played", "Hello there."),
        ("segment", "How are you?"),
        ("played", "How are you?"),
        ("stopped", ""),
    ]
    assert marked == [5], "the mark fires once the audio before it has been sent"


async def test_flush_reports_only_the_words_already_sent() -> None:
    playout = Playout()
    track = PacedAudioTrack(playout)
    text = "one two three four five six seven eight nine ten"
    track.write(tone(OUT_RATE, 0.2), OUT_RATE, text=text)  # ten 20 ms frames
    marked: list[bool] = []
    track.mark(lambda: marked.append(True))
    for _ in range(4):
        await track.recv()
    track.flush()
    assert playout.log == [
        ("started", ""),
        ("segment", text),
        ("played", "one two three four"),
        ("stopped", ""),
    ]
    assert marked == [], "a flushed mark never fires"
    assert rms(await track.recv_pcm()) == 0
    # Offsets stay consistent after a flush: a new segment is reported whole.
    track.write(tone(OUT_RATE, 0.02), OUT_RATE, text="again")
    await track.recv()
    await track.recv()
    assert playout.log[-3:] == [("segment", "again"), ("played", "again"), ("stopped", "")][-3:]


async def test_a_voices_word_times_place_the_cut_and_the_progress_exactly() -> None:
    """A long first word: by its share of the text, two words would be heard after 80 ms;
    by the voice's own times, "Supercalifragilistic" alone is still playing."""
    playout = Playout()
    track = PacedAudioTrack(playout)
    progress: list[str] = []
    track.on_progress = lambda _text, heard: progress.append(heard)
    text = SpokenText("Supercalifragilistic is long")
    text.add_word("Supercalifragilistic", 0.0, 0.15)
    text.add_word("is", 0.15, 0.17)
    text.add_word("long", 0.17, 0.2)
    track.write(tone(OUT_RATE, 0.2), OUT_RATE, text=text)
    for _ in range(4):  # 80 ms sent
        await track.recv()
    assert progress == ["Supercalifragilistic"]
    track.flush()
    assert ("played", "Supercalifragilistic") in playout.log
    assert [heard_until(text, 0.155), heard_until(text, 0.155, started=True)] == [20, 23]


async def test_mark_on_an_empty_track_fires_at_once() -> None:
    track = PacedAudioTrack()
    fired: list[bool] = []
    track.mark(lambda: fired.append(True))
    assert fired == [True]
