"""``PARLEY_LANGUAGE`` from the environment to a call: the words the adaptive turn end
reads, the backchannels, the STT's language; and a language the embedded STT cannot
hear stops the start with a message, not a traceback.

Real :class:`server.session.voice.VoiceSession` objects built from real settings (the
services at the OpenAI-compatible stub), fed as the session feeds its conversation.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from loguru import logger

from pipeline.events import (
    SpeechOnset,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    TurnEndScore,
    UserTurnStopped,
)
from server.media.outbound_track import PacedAudioTrack
from server.session.model_services import build_services
from server.session.voice import VoiceSession
from server.settings import Settings
from testkit.openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stub_settings(stub: OpenAIStub) -> Settings:
    return Settings(**stub.server_settings(greeting=""))


@asynccontextmanager
async def voice_session(settings: Settings) -> AsyncIterator[VoiceSession]:
    services = build_services(settings)
    session = VoiceSession(services, settings, PacedAudioTrack(), lambda _: None)
    session.start()
    try:
        yield session
    finally:
        await session.close()
        await services.aclose()


async def turn_wait(session: VoiceSession, words: str) -> float:
    """Seconds from the end of speech to the end of the turn, for ``words`` the model is
    sure are finished (0.95)."""
    stopped: list[UserTurnStopped] = []
    session.conversation.events.on(UserTurnStopped, stopped.append)
    feed = session.conversation.feed
    now = time.monotonic()
    start, end = now - 0.8, now - 0.2
    for event in (SpeechOnset(start), SpeechStarted(start), SpeechStopped(end)):
        feed(event)
    feed(Transcription(words, now + 0.02))
    feed(TurnEndScore(now + 0.04, 0.95, end))
    deadline = time.monotonic() + 3.0
    while not stopped and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert stopped, "the turn never ended"
    return stopped[0].t - end


UNPUNCTUATED_QUESTION = "puedes ayudarme con la reserva"


async def test_the_language_chooses_the_words_the_turn_end_reads(
    openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # English words cannot tell this is a question: a statement waits 0.7 s at least.
    async with voice_session(stub_settings(openai_stub)) as session:
        english = await turn_wait(session, UNPUNCTUATED_QUESTION)
    monkeypatch.setenv("PARLEY_LANGUAGE", "es")
    async with voice_session(stub_settings(openai_stub)) as session:
        spanish = await turn_wait(session, UNPUNCTUATED_QUESTION)
    assert english >= 0.65
    assert spanish < 0.35  # a question the model is sure of: as soon as the words are in


async def test_a_transcript_reported_in_another_cue_language_is_read_in_it(
    openai_stub: OpenAIStub,
) -> None:
    async with voice_session(stub_settings(openai_stub)) as session:  # PARLEY_LANGUAGE=en
        feed = session.conversation.feed
        original = feed

        def reported_spanish(event: object) -> None:
            if isinstance(event, Transcription):
                event = Transcription(event.text, event.t, language="es")
            original(event)

        session.conversation.feed = reported_spanish  # type: ignore[method-assign]
        assert await turn_wait(session, UNPUNCTUATED_QUESTION) < 0.35


async def test_the_language_chooses_the_default_backchannels_and_the_stt_language(
    openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with voice_session(stub_settings(openai_stub)) as session:
        params = session.conversation.barge_in.decider.params
        assert params.is_backchannel("Mhm.") and not params.is_backchannel("Vale, vale.")
    monkeypatch.setenv("PARLEY_LANGUAGE", "es")
    settings = stub_settings(openai_stub)
    async with voice_session(settings) as session:
        params = session.conversation.barge_in.decider.params
        assert params.is_backchannel("Vale, vale.") and params.is_backchannel("¡Sí!")
        assert not params.is_backchannel("¿Sí?")  # asking, not listening
    services = build_services(settings)
    try:
        assert services.stt.language == "es"  # type: ignore[attr-defined]
    finally:
        await services.aclose()
    # Set by the user, the list is theirs whatever the language.
    monkeypatch.setenv("PARLEY_BACKCHANNELS", '["claro que sí"]')
    assert Settings().backchannels == ["claro que sí"]


def test_a_language_without_cues_starts_with_a_warning(
    openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_LANGUAGE", "it")
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        services = build_services(stub_settings(openai_stub))
        asyncio.run(services.aclose())
    finally:
        logger.remove(sink)
    assert any("language 'it' has no turn-taking word cues" in line for line in lines)


@pytest.mark.parametrize("value", ["english", "e", "en-US", "12"])
def test_a_language_must_be_a_two_letter_code(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PARLEY_LANGUAGE", value)
    with pytest.raises(ValueError, match="two-letter ISO 639-1 code"):
        Settings()


@pytest.mark.e2e
def test_an_english_only_embedded_stt_and_another_language_stop_the_start() -> None:
    env = {**os.environ, "PARLEY_LANGUAGE": "es", "PARLEY_STT": "local",
           "PARLEY_EMBEDDED_STT": "whisper-tiny.en", "PARLEY_PORT": "1"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "server"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "whisper-tiny.en is English-only; it cannot transcribe 'es'" in done.stderr
