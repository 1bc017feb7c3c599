"""Who answers: the LLM the settings choose (``PARLEY_LLM``) and its fallbacks
(``PARLEY_LLM_FALLBACK``), built once and shared by every call.

A vendor's SDK is imported only when its vendor is chosen. Each remote LLM has its own
circuit breaker, so a fallback answers at once while the one before is known to be down.
A fallback takes its vendor's default model (``PARLEY_LLM_MODEL`` names the chosen LLM's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.realtime.service import RealtimeConfig, RealtimeModels
from pipeline.services.circuit import CircuitBreaker
from pipeline.services.embedded import EmbeddedModels
from pipeline.services.fallback_llm import FallbackLLM
from pipeline.services.llm import LLMService
from pipeline.services.local_llm import LocalLLM
from pipeline.services.openai_llm import OpenAILLM
from server.settings import Settings

Breakers = Callable[[Settings, str], CircuitBreaker]


def build_llm(settings: Settings, embedded: EmbeddedModels | None, breaker: Breakers) -> LLMService:
    """The LLM (a :class:`FallbackLLM` in front of it and its fallbacks, if any)."""
    names = list(dict.fromkeys([settings.provider("llm"), *settings.llm_fallback]))
    services = [_one(name, settings, embedded, breaker) for name in names]
    return FallbackLLM(services, names) if len(services) > 1 else services[0]


def llm_chain(llm: LLMService) -> list[tuple[str, LLMService]]:
    """The LLM and its fallbacks, each with its name (the first named "llm")."""
    if not isinstance(llm, FallbackLLM):
        return [("llm", llm)]
    return [("llm", llm.services[0]), *zip(llm.names[1:], llm.services[1:], strict=True)]


def llm_serving(llm: FallbackLLM) -> dict[str, Any]:
    """For /health: the order, who answered last, how many answers the fallbacks gave."""
    return {"order": llm.names, "serving": llm.serving, "fallback_answers": llm.answered}


def _one(
    name: str, settings: Settings, embedded: EmbeddedModels | None, breaker: Breakers
) -> LLMService:
    if name == "local":
        return LocalLLM(embedded, max_tokens=settings.llm_token_limit() or 80)
    if name == "realtime":
        return _realtime(settings, breaker)
    if name in ("anthropic", "google"):
        return _vendor(name, settings, breaker)
    return OpenAILLM(
        settings.llm_model_name(name),
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key,
        supports_tools=settings.llm_supports_tools,
        first_token_timeout=settings.llm_timeout,
        chunk_timeout=settings.llm_timeout,
        max_tokens=settings.llm_token_limit(),
        breaker=breaker(settings, "llm"),
        thoughts_in_context=settings.llm_thoughts_in_context,
    )


def _vendor(name: str, settings: Settings, breaker: Breakers) -> LLMService:
    """Claude or Gemini; the vendor's SDK is imported only now, when it is chosen."""
    options: dict[str, Any] = {
        "api_key": settings.vendor_key(name),
        "supports_tools": settings.llm_supports_tools,
        "first_token_timeout": settings.llm_timeout,
        "chunk_timeout": settings.llm_timeout,
        "max_tokens": settings.llm_token_limit(),
        "breaker": breaker(settings, "llm"),
        "thoughts_in_context": settings.llm_thoughts_in_context,
    }
    if name == "anthropic":
        from pipeline.services.anthropic_llm import AnthropicLLM

        budget = settings.llm_thinking_budget
        return AnthropicLLM(settings.llm_model_name(name), base_url=settings.anthropic_url,
                            thinking_budget=budget, **options)  # fmt: skip
    from pipeline.services.google_llm import GoogleLLM

    # Unset, Gemini's own default (2.5 Flash thinks, unseen); set, 0 turns that off.
    said = "llm_thinking_budget" in settings.model_fields_set
    return GoogleLLM(settings.llm_model_name(name), base_url=settings.google_url,
                     thinking_budget=settings.llm_thinking_budget if said else None,
                     **options)  # fmt: skip


def _realtime(settings: Settings, breaker: Breakers) -> RealtimeModels:
    key = settings.realtime_api_key
    config = RealtimeConfig(
        base_url=settings.realtime_base_url,
        model=settings.realtime_model,
        voice=settings.realtime_voice,
        api_key=key.get_secret_value() if key else settings.openai_api_key,
        dialect=settings.realtime_dialect,
        timeout=settings.realtime_timeout,
        turns=settings.realtime_turn_detection,
    )
    return RealtimeModels(config, breaker(settings, "llm"))
