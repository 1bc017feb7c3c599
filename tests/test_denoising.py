"""Noise suppression off the event loop (pipeline/hearing/denoising.py): every session's
frames in one worker, in order per stream, never late, and freed safely; then a real
call's hearing with ``PARLEY_NOISE_SUPPRESSION=rnnoise`` (the real library)."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
from pydantic import ValidationError

from pipeline.audio.noise_suppression import NoiseSuppressionError, NoiseSuppressor
from pipeline.events import Event, SpeechStarted, SpeechStopped
from pipeline.hearing import denoising, rnnoise
from pipeline.hearing.denoising import Denoising
from pipeline.services.model_files import ModelPackage
from server.media.outbound_track import PacedAudioTrack
from server.session.model_services import build_services
from server.session.voice import VoiceSession
from server.settings import Settings
from testkit.openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401
from testkit.speech import SENTENCE_A, espeak, pink, timeline
from testkit.vad_feed import frames


class Recording:
    """A stand-in suppressor: marks each frame, records the thread, may wait or fail."""

    def __init__(self, mark: bytes = b"", gate: threading.Event | None = None) -> None:
        self.mark, self.gate, self.threads, self.closed = mark, gate, set(), False
        self.fail = False

    def process(self, frame: bytes) -> bytes:
        self.threads.add(threading.get_ident())
        if self.gate is not None:
            self.gate.wait(5)
        if self.fail:
            raise RuntimeError("broken")
        return self.mark + frame

    def close(self) -> None:
        self.closed = True


async def settle(work: Denoising) -> None:
    for _ in range(500):
        if work._drain is None and not work._pending:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the denoising worker did not finish")


async def test_frames_come_back_in_order_per_stream_from_a_worker() -> None:
    work = Denoising(asyncio.get_running_loop())
    a, b = Recording(b"a:"), Recording(b"b:")
    got: dict[str, list[tuple[bytes, float]]] = {"a": [], "b": []}
    for i in range(20):
        work.submit(a, bytes([i]), i, lambda pcm, t: got["a"].append((pcm, t)))  # type: ignore[arg-type]
        work.submit(b, bytes([i]), i, lambda pcm, t: got["b"].append((pcm, t)))  # type: ignore[arg-type]
        if i % 7 == 0:
            await asyncio.sleep(0)  # some frames arrive while a job runs
    await settle(work)
    assert got["a"] == [(b"a:" + bytes([i]), i) for i in range(20)]
    assert got["b"] == [(b"b:" + bytes([i]), i) for i in range(20)]
    assert threading.get_ident() not in a.threads | b.threads, "denoised on the loop"
    assert work.frames == 40 and work.passed == 0


async def test_a_frame_that_waited_too_long_goes_on_as_it_came(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(denoising, "MAX_WAIT", -1.0)  # every frame is late
    work, got = Denoising(asyncio.get_running_loop()), []
    work.submit(Recording(b"x:"), b"frame", 1.0, lambda pcm, t: got.append(pcm))  # type: ignore[arg-type]
    await settle(work)
    assert got == [b"frame"] and work.passed == 1


async def test_a_failing_job_passes_its_frames_on() -> None:
    work, got, broken = Denoising(asyncio.get_running_loop()), [], Recording()
    broken.fail = True
    work.submit(broken, b"frame", 1.0, lambda pcm, t: got.append(pcm))  # type: ignore[arg-type]
    await settle(work)
    assert got == [b"frame"] and work.passed == 1


async def test_a_released_stream_is_freed_only_after_the_job_using_it() -> None:
    work, gate, got = Denoising(asyncio.get_running_loop()), threading.Event(), []
    busy = Recording(b"x:", gate)
    work.submit(busy, b"1", 0.0, lambda pcm, t: got.append(pcm))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)  # the job is in the worker, waiting on the gate
    work.submit(busy, b"2", 0.02, lambda pcm, t: got.append(pcm))  # type: ignore[arg-type]
    work.release(busy)  # type: ignore[arg-type]
    assert not busy.closed, "freed while the worker still used it"
    gate.set()
    await settle(work)
    assert busy.closed and got == [b"x:1"]  # the pending frame was dropped
    idle = Recording()
    work.release(idle)  # type: ignore[arg-type]
    assert idle.closed


def noisy_sentence() -> np.ndarray:
    """A sentence in pink noise 10 dB below it, with noise alone around it."""
    line = timeline(1.0, espeak(SENTENCE_A), 1.5).samples.astype(np.float64)
    voiced = line[np.abs(line) > 0]
    noise = pink(np.random.default_rng(3), line.size)
    noise *= np.sqrt(np.mean(voiced**2) / 10 / np.mean(noise**2))
    return np.clip(np.round(line + noise), -32768, 32767).astype(np.int16)


async def test_a_call_with_rnnoise_hears_the_denoised_speech_off_the_loop(
    openai_stub: OpenAIStub,
) -> None:
    fields = openai_stub.server_settings(greeting="", turn_end="fixed")
    settings = Settings(**fields, noise_suppression="rnnoise")
    services = build_services(settings)
    session = VoiceSession(services, settings, PacedAudioTrack(), lambda _: None)
    noise = session.hearing.noise
    assert isinstance(noise, NoiseSuppressor)
    threads: set[int] = set()
    process = noise.process

    def recording(frame: bytes) -> bytes:
        threads.add(threading.get_ident())
        return process(frame)

    noise.process = recording  # type: ignore[method-assign]
    heard: list[Event] = []
    feed = session.conversation.feed
    session.conversation.feed = lambda e: (heard.append(e), feed(e))[1]  # type: ignore[method-assign]
    session.start()
    try:
        for frame, _ in frames(noisy_sentence()):
            session.push_audio(frame)
            await asyncio.sleep(0.005)
        for _ in range(200):
            if any(isinstance(e, SpeechStopped) for e in heard):
                break
            await asyncio.sleep(0.01)
    finally:
        await session.close()
        await services.aclose()
    assert [type(e) for e in heard if isinstance(e, SpeechStarted | SpeechStopped)] == [
        SpeechStarted,
        SpeechStopped,
    ]
    assert threads and threading.get_ident() not in threads


async def test_hearing_that_was_not_started_denoises_inline_and_frees_it(
    openai_stub: OpenAIStub,
) -> None:
    """Offline (tests, replays): no loop to batch on, so the frame is denoised in the call."""
    fields = openai_stub.server_settings(greeting="", turn_end="fixed")
    settings = Settings(**fields, noise_suppression="rnnoise")
    services = build_services(settings)
    session = VoiceSession(services, settings, PacedAudioTrack(), lambda _: None)
    heard: list[Event] = []
    session.hearing.vad_events = heard.extend  # type: ignore[method-assign]
    for frame, _ in frames(noisy_sentence()):
        session.hearing.push_audio(frame)
    assert any(isinstance(e, SpeechStarted) for e in heard)
    noise = session.hearing.noise
    assert isinstance(noise, NoiseSuppressor)
    session.hearing.stop()
    assert not noise._finalizer.alive  # its C state freed
    await session.close()
    await services.aclose()


async def test_the_setting_is_off_or_rnnoise_and_rnnoise_must_load(
    openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = openai_stub.server_settings(greeting="", turn_end="fixed")
    assert Settings(**fields).noise_suppression == "off"
    services = build_services(Settings(**fields))
    assert services.noise_suppression is None
    await services.aclose()
    with pytest.raises(ValidationError):
        Settings(**fields, noise_suppression="speex")
    missing = ModelPackage("pyrnnoise", "0.4.5", "no_such_module_here", "lib.so", (), True)
    monkeypatch.setattr(rnnoise, "rnnoise_package", lambda: missing)
    monkeypatch.setattr(rnnoise, "_shared", None)
    with pytest.raises(NoiseSuppressionError, match="pip install --no-deps pyrnnoise"):
        build_services(Settings(**fields, noise_suppression="rnnoise"))
