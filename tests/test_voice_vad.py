"""A call's VAD in the server's voice pipeline: scored off the event loop, batched across
the loop's sessions, with the same decisions, in order, as inline scoring.

Real :class:`server.session.voice.VoiceSession` objects (providers at the OpenAI-compatible stub
on a real socket), real Silero on espeak-ng speech, fed as the transport feeds them.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from pipeline.events import Event, SpeechFalseStart, SpeechOnset, SpeechStarted, SpeechStopped
from pipeline.hearing.silero import SileroModel
from pipeline.hearing.vad import VADAnalyzer, VADParams
from server.media.outbound_track import PacedAudioTrack
from server.session.model_services import build_services
from server.session.voice import VoiceSession
from server.settings import Settings
from testkit.openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401
from testkit.speech import SENTENCE_A, SENTENCE_B, espeak, timeline
from testkit.vad_feed import frames, kinds, run

VAD_KINDS = SpeechOnset | SpeechStarted | SpeechStopped | SpeechFalseStart


class ThreadRecordingModel(SileroModel):
    """The real model, recording the size and thread of each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        super().__init__()
        self.calls.clear()  # not the warm-up call

    def infer(self, windows: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.calls.append((windows.shape[0], threading.get_ident()))
        return super().infer(windows, state)


def heard_by_conversation(session: VoiceSession) -> list[Event]:
    """The VAD events the session's conversation is fed, in order."""
    seen: list[Event] = []
    feed = session.conversation.feed

    def recording_feed(event: Event) -> None:
        if isinstance(event, VAD_KINDS):
            seen.append(event)
        feed(event)

    session.conversation.feed = recording_feed  # type: ignore[method-assign]
    return seen


async def test_sessions_vad_runs_off_the_loop_batched_and_in_order(
    openai_stub: OpenAIStub,
) -> None:
    settings = Settings(**openai_stub.server_settings(greeting="", turn_end="fixed"))
    services = build_services(settings)
    model = services.vad = ThreadRecordingModel()
    params = VADParams(
        confidence=settings.vad_confidence,
        start_secs=settings.vad_start_secs,
        stop_secs=settings.vad_stop_secs,
    )
    lines = [
        timeline(0.5, espeak(SENTENCE_A), 1.2).samples,
        timeline(0.3, espeak(SENTENCE_B), 1.4).samples,
    ]
    expected = [kinds(run(VADAnalyzer(params, model), line, onsets=True)) for line in lines]
    assert SpeechStarted in expected[0] and SpeechStopped in expected[1]
    model.calls.clear()
    sessions = [VoiceSession(services, settings, PacedAudioTrack(), lambda _: None) for _ in lines]
    heard = [heard_by_conversation(s) for s in sessions]
    for session in sessions:
        session.start()
    try:
        feeds = [frames(line) for line in lines]
        for tick in range(max(len(f) for f in feeds)):
            for session, feed in zip(sessions, feeds, strict=True):
                if tick < len(feed):  # both peers' packets in the same loop iteration
                    session.push_audio(feed[tick][0])
            await asyncio.sleep(0.004)  # faster than real time, slower than inference
        for _ in range(100):
            if [kinds(h) for h in heard] == expected:
                break
            await asyncio.sleep(0.01)
    finally:
        for session in sessions:
            await session.close()
        await services.aclose()

    loop_thread = threading.get_ident()
    assert model.calls, "no window was scored"
    assert all(thread != loop_thread for _, thread in model.calls), "Silero ran on the loop"
    assert max(size for size, _ in model.calls) == 2, "the sessions were not batched together"
    assert [kinds(h) for h in heard] == expected
