"""Who transcribes: the STT the settings choose (``PARLEY_STT``) and its fallbacks
(``PARLEY_STT_FALLBACK``), built once and shared by every call.

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
from pipeline.services.local_stt import LocalSTT
from pipeline.services.openai_stt import OpenAISTT
from pipeline.services.stt import STTService
from server.settings import Settings

Breakers = Callable[[Settings, str], CircuitBreaker]
# A live STT's wait for its final words: a vendor that takes longer is failing, and the
# fallback must answer within a second of silence more (issue 43).
FINALIZE_SECONDS = 1.0


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
