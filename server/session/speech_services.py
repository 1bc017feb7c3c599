"""Who transcribes and who speaks: the STT the settings choose (``PARLEY_STT``) and its
fallbacks (``PARLEY_STT_FALLBACK``), and the TTS (``PARLEY_TTS``), built once and shared
by every call.

A vendor's client module is imported only when it is chosen. Each remote STT has its own
circuit breaker: one that keeps failing is then skipped at once, and the fallback answers
without waiting out its timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.services.circuit import CircuitBreaker, CircuitState
from pipeline.services.embedded import EmbeddedModels
from pipeline.services.fallback_stt import FallbackSTT
from pipeline.services.fallback_tts import FallbackTTS
from pipeline.services.local_stt import LocalSTT
from pipeline.services.local_tts import LocalTTS
from pipeline.services.openai_stt import OpenAISTT
from pipeline.services.openai_tts import OpenAITTS
from pipeline.services.retry import RetryPolicy
from pipeline.services.stt import STTService
from pipeline.services.tts import TTSService
from server.settings import Settings

Breakers = Callable[[Settings, str], CircuitBreaker]
# A live STT's wait for its final words: a vendor that takes longer is failing, and the
# fallback must answer within a second of silence more (issue 43).
FINALIZE_SECONDS = 1.0
# OpenAI's realtime transcription starts at the commit (not while the audio streams):
# its words take a model call longer.
TRANSCRIBE_SECONDS = 2.0
FALLBACK_SECONDS = 1.0  # a voice's time to connect or to speak, with a fallback behind it


def build_stt(
    settings: Settings, embedded: EmbeddedModels | None, breaker: Breakers
) -> tuple[STTService, FallbackSTT | None]:
    """The STT, and the chain of its fallbacks (None without any)."""
    names = list(dict.fromkeys([settings.provider("stt"), *settings.stt_fallback]))
    services = [_one(name, settings, embedded, breaker) for name in names]
    fallback = None
    if len(services) > 1:
        fallback = FallbackSTT(services[1:], names[1:], after=names[0])
    return services[0], fallback


def stt_serving(stt: STTService, fallback: FallbackSTT) -> dict[str, Any]:
    """For /health: the order, which serves now (the first whose breaker lets calls
    through) and how many utterances a fallback transcribed."""
    chain = [stt, *fallback.services]
    names = [fallback.after, *fallback.names]
    serving = names[-1]
    for service, name in zip(chain, names, strict=True):
        circuit = getattr(service, "breaker", None)
        if not isinstance(circuit, CircuitBreaker) or circuit.state != CircuitState.OPEN:
            serving = name
            break
    return {"order": names, "serving": serving, "fallback_utterances": fallback.answered}


def _one(
    name: str, settings: Settings, embedded: EmbeddedModels | None, breaker: Breakers
) -> STTService:
    # Only when set: a deployment that left it alone keeps the service's own language
    # detection (a caller in another language is still transcribed).
    language = settings.language if "language" in settings.model_fields_set else None
    if name == "local":
        return LocalSTT(embedded, language=settings.language)
    if name == "deepgram":
        from pipeline.services.deepgram_stt import DeepgramSTT

        return DeepgramSTT(
            settings.vendor_key("deepgram") or "", model=settings.stt_model_name(name),
            language=language, base_url=settings.deepgram_url, breaker=breaker(settings, "stt"),
            finalize_timeout=FINALIZE_SECONDS,
        )  # fmt: skip
    if name == "openai-realtime":
        from pipeline.services import openai_realtime_stt as realtime

        return realtime.OpenAIRealtimeSTT(
            settings.openai_api_key or "", model=settings.stt_model_name(name),
            language=language, base_url=settings.openai_base_url or realtime.DEFAULT_BASE_URL,
            breaker=breaker(settings, "stt"), finalize_timeout=TRANSCRIBE_SECONDS,
        )  # fmt: skip
    if name == "assemblyai":
        from pipeline.services.assemblyai_stt import AssemblyAISTT

        return AssemblyAISTT(
            settings.vendor_key("assemblyai") or "", model=settings.stt_model_name(name),
            language=language, base_url=settings.assemblyai_url,
            breaker=breaker(settings, "stt"), finalize_timeout=FINALIZE_SECONDS,
        )  # fmt: skip
    return OpenAISTT(
        settings.stt_model_name(name),
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key,
        language=language,
        timeout=settings.stt_timeout,
        total_timeout=settings.stt_timeout,
        breaker=breaker(settings, "stt"),
    )


def build_tts(settings: Settings, embedded: EmbeddedModels | None, breaker: Breakers) -> TTSService:
    """The TTS (a :class:`FallbackTTS` in front of it and its ``PARLEY_TTS_FALLBACK``)."""
    names = list(dict.fromkeys([settings.provider("tts"), *settings.tts_fallback]))
    # A voice with a fallback behind it gets a second to answer, not PARLEY_TTS_TIMEOUT:
    # the caller must not wait out a dead vendor in silence (issue 43).
    services = [_one_tts(name, settings, embedded, breaker, quick=name != names[-1])
                for name in names]  # fmt: skip
    return FallbackTTS(services, names) if len(services) > 1 else services[0]


def tts_chain(tts: TTSService) -> list[tuple[str, TTSService]]:
    """The TTS and its fallbacks, each with its name (the first named "tts")."""
    if not isinstance(tts, FallbackTTS):
        return [("tts", tts)]
    return [("tts", tts.services[0]), *zip(tts.names[1:], tts.services[1:], strict=True)]


def tts_serving(tts: FallbackTTS) -> dict[str, Any]:
    """For /health: the order, who spoke the last sentence, how many the fallbacks spoke."""
    return {"order": tts.names, "serving": tts.serving, "fallback_sentences": tts.answered}


def _one_tts(
    name: str,
    settings: Settings,
    embedded: EmbeddedModels | None,
    breaker: Breakers,
    quick: bool = False,
) -> TTSService:
    """A voice: a vendor's over one WebSocket per call, OpenAI's or the embedded one."""
    if name == "local":
        return LocalTTS(embedded)
    if name in ("cartesia", "elevenlabs", "deepgram"):
        return _vendor_tts(name, settings, breaker, FALLBACK_SECONDS if quick else None)
    return OpenAITTS(
        settings.tts_model,
        settings.tts_voice,
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key,
        timeout=settings.tts_timeout,
        retry=RetryPolicy(deadline=settings.tts_timeout),
        breaker=breaker(settings, "tts"),
    )


def _vendor_tts(
    name: str, settings: Settings, breaker: Breakers, within: float | None
) -> TTSService:
    """``within``: the most seconds to connect or to the first audio (a fallback waits)."""
    model, voice = settings.tts_voice_of(name)
    key = settings.vendor_key(name) or ""
    language = settings.language if "language" in settings.model_fields_set else None
    circuit, timeout = breaker(settings, "tts"), min(settings.tts_timeout, within or 1e9)
    connect = min(5.0, within or 5.0)
    if name == "cartesia":
        from pipeline.services import cartesia_tts as cartesia

        return cartesia.CartesiaTTS(
            key, base_url=settings.cartesia_url or cartesia.DEFAULT_BASE_URL, model=model,
            voice=voice, language=language, breaker=circuit, audio_timeout=timeout,
            connect_timeout=connect,
        )  # fmt: skip
    if name == "elevenlabs":
        from pipeline.services import elevenlabs_tts as elevenlabs

        return elevenlabs.ElevenLabsTTS(
            key, base_url=settings.elevenlabs_url or elevenlabs.DEFAULT_BASE_URL, model=model,
            voice=voice, language=language, breaker=circuit, audio_timeout=timeout,
            connect_timeout=connect,
        )  # fmt: skip
    from pipeline.services import deepgram_tts as deepgram

    return deepgram.DeepgramTTS(
        key, base_url=settings.deepgram_url or deepgram.DEFAULT_BASE_URL, model=model,
        voice=voice, breaker=circuit, audio_timeout=timeout,
            connect_timeout=connect,
    )  # fmt: skip
