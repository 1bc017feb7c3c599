"""The model services for every session, built once from the settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loguru import logger

from pipeline.builtin_tools import default_registry
from pipeline.services.circuit import CircuitBreaker
from pipeline.services.embedded import EmbeddedModels
from pipeline.services.llm import LLMService
from pipeline.services.local_llm import LocalLLM
from pipeline.services.local_stt import LocalSTT
from pipeline.services.local_tts import LocalTTS
from pipeline.services.openai_llm import OpenAILLM
from pipeline.services.openai_stt import OpenAISTT
from pipeline.services.openai_tts import OpenAITTS
from pipeline.services.retry import RetryPolicy
from pipeline.services.stt import STTService
from pipeline.services.tts import TTSService
from pipeline.silero import SileroModel
from pipeline.tools import ToolRegistry, ToolSpec
from pipeline.turn_scorer import TurnScorer
from server.settings import ClientToolDefinition, Settings


@dataclass
class Services:
    """Shared by all sessions: the clients hold no per-call state."""

    stt: STTService
    llm: LLMService
    tts: TTSService
    tools: ToolRegistry
    embedded: EmbeddedModels | None
    vad: SileroModel
    turn_scorer: TurnScorer | None = None  # the end-of-turn model (adaptive turn end)

    def circuits(self) -> dict[str, Any]:
        """The circuit breakers of the remote services, for /health."""
        out: dict[str, Any] = {}
        for role in ("stt", "llm", "tts"):
            breaker = getattr(getattr(self, role), "breaker", None)
            if isinstance(breaker, CircuitBreaker):
                out[role] = breaker.status()
        return out

    def status(self) -> dict[str, Any]:
        """What /health reports about the models."""
        kinds = {role: type(getattr(self, role)).__name__ for role in ("stt", "llm", "tts")}
        embedded = self.embedded.status() if self.embedded else {}
        turn = None
        if self.turn_scorer is not None:
            turn = {"model": "Smart Turn v3.2", "pool": self.turn_scorer.pool.stats().as_dict()}
        return {"ready": self.ready, "services": kinds, "embedded": embedded, "turn_end": turn}

    @property
    def ready(self) -> bool:
        """Every embedded model in use is loaded (remote services count as ready)."""
        if self.embedded is None:
            return True
        return all(m.ready for m in self.embedded.models if self._uses(m.role))

    async def load(self) -> None:
        """Load and warm the embedded models in use (start-up, off the event loop)."""
        if self.embedded is None:
            return
        in_use = [m for m in self.embedded.models if self._uses(m.role)]
        for model in in_use:
            await model.get()

    def _uses(self, role: str) -> bool:
        return isinstance(getattr(self, role), LocalSTT | LocalLLM | LocalTTS)

    async def aclose(self) -> None:
        for service in (self.stt, self.llm, self.tts):
            close = getattr(service, "aclose", None)
            if close is not None:
                await close()
        if self.embedded is not None:
            self.embedded.shutdown()
        if self.turn_scorer is not None:
            self.turn_scorer.shutdown()


def build_services(settings: Settings) -> Services:
    """The STT, LLM and TTS the settings ask for; embedded models load lazily."""
    embedded = None
    if "local" in (settings.provider("stt"), settings.provider("llm"), settings.provider("tts")):
        embedded = EmbeddedModels.shared()
    stt, llm, tts = _stt(settings, embedded), _llm(settings, embedded), _tts(settings, embedded)
    logger.info(
        "models: stt={} llm={} tts={}",
        type(stt).__name__,
        type(llm).__name__,
        type(tts).__name__,
    )
    tools = default_registry(demo_tools=settings.demo_tools)
    for definition in settings.client_tools:
        tools.register(client_tool_spec(definition, settings.client_tool_timeout))
    # Loaded (and its file checked) now: a missing model stops the start, not a turn.
    scorer = TurnScorer() if settings.turn_end == "adaptive" else None
    return Services(stt, llm, tts, tools, embedded, SileroModel.shared(), scorer)


def _breaker(settings: Settings, service: str) -> CircuitBreaker:
    # One per service: each shared by every session, as the service itself is.
    return CircuitBreaker(service, settings.circuit_failure_threshold, settings.circuit_cooldown)


def _stt(settings: Settings, embedded: EmbeddedModels | None) -> STTService:
    if settings.provider("stt") == "local":
        return LocalSTT(embedded)
    return OpenAISTT(
        settings.stt_model,
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key,
        timeout=settings.stt_timeout,
        total_timeout=settings.stt_timeout,
        breaker=_breaker(settings, "stt"),
    )


def _llm(settings: Settings, embedded: EmbeddedModels | None) -> LLMService:
    if settings.provider("llm") == "local":
        return LocalLLM(embedded, max_tokens=settings.llm_token_limit() or 80)
    return OpenAILLM(
        settings.llm_model,
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key,
        supports_tools=settings.llm_supports_tools,
        first_token_timeout=settings.llm_timeout,
        chunk_timeout=settings.llm_timeout,
        max_tokens=settings.llm_token_limit(),
        breaker=_breaker(settings, "llm"),
        thoughts_in_context=settings.llm_thoughts_in_context,
    )


def _tts(settings: Settings, embedded: EmbeddedModels | None) -> TTSService:
    if settings.provider("tts") == "local":
        return LocalTTS(embedded)
    return OpenAITTS(
        settings.tts_model,
        settings.tts_voice,
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key,
        timeout=settings.tts_timeout,
        retry=RetryPolicy(deadline=settings.tts_timeout),
        breaker=_breaker(settings, "tts"),
    )


def client_tool_spec(definition: ClientToolDefinition, default_timeout: float) -> ToolSpec:
    """The registry entry of a tool the client runs (``PARLEY_CLIENT_TOOLS``)."""
    return ToolSpec(
        name=definition.name,
        description=definition.description,
        parameters=definition.parameters,
        timeout=definition.timeout or default_timeout,
        cancel_on_interruption=definition.cancel_on_interruption,
        client_side=True,
        report_level=definition.report_level,
    )
