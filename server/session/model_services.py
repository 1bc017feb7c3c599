"""The model services for every session, built once from the settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loguru import logger

from pipeline.audio.noise_suppression import RNNoiseLibrary
from pipeline.hearing.rnnoise import shared_rnnoise
from pipeline.hearing.silero import SileroModel
from pipeline.hearing.turn_scorer import TurnScorer
from pipeline.services.circuit import CircuitBreaker
from pipeline.services.embedded import EmbeddedModels
from pipeline.services.fallback_llm import FallbackLLM
from pipeline.services.fallback_stt import FallbackSTT
from pipeline.services.fallback_tts import FallbackTTS
from pipeline.services.llm import LLMService
from pipeline.services.local_llm import LocalLLM
from pipeline.services.local_stt import LocalSTT
from pipeline.services.local_tts import LocalTTS
from pipeline.services.stt import STTService
from pipeline.services.tts import TTSService
from pipeline.tools.agent import Agent
from pipeline.tools.builtin import default_registry
from pipeline.tools.registry import ToolRegistry, ToolSpec
from pipeline.tools.sources.http import HTTPTools
from pipeline.turns.languages import CUE_LANGUAGES
from server.session.llm_services import build_llm, llm_chain, llm_serving
from server.session.speech_services import (
    build_stt,
    build_tts,
    stt_serving,
    tts_chain,
    tts_serving,
)
from server.settings import ClientToolDefinition, Settings

if TYPE_CHECKING:  # the MCP SDK takes ~1.5 s to import: only when servers are configured
    from pipeline.tools.sources.mcp import MCPTools


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
    noise_suppression: RNNoiseLibrary | None = None  # PARLEY_NOISE_SUPPRESSION=rnnoise
    agent: Agent | None = None  # the agent file's (PARLEY_AGENT): every call starts with it
    mcp: MCPTools | None = None  # MCP tool servers, one connection each for every call
    http_tools: HTTPTools | None = None
    # False while the embedded LLM reads the first turn's prompt at start-up: not ready yet.
    prompt_warm: bool = True
    stt_fallback: FallbackSTT | None = None  # PARLEY_STT_FALLBACK: after the STT, in order

    async def start_tool_sources(self) -> None:
        """Connect the MCP servers and register their tools (after the app's own tools, so
        that a clash renames the MCP tool, not the app's)."""
        if self.mcp is not None:
            await self.mcp.start()

    def tool_sources_status(self) -> dict[str, Any]:
        """What /health shows of the tool sources."""
        out: dict[str, Any] = {}
        if self.mcp is not None:
            out["mcp"] = self.mcp.status()
        if self.http_tools is not None:
            out["http"] = [spec.name for spec in self.http_tools.specs()]
        if self.agent is not None:
            out["agent"] = {"name": self.agent.name, "tools": [t.name for t in self.agent.tools]}
        return out

    def failing_tool_sources(self) -> list[str]:
        return self.mcp.failing() if self.mcp is not None else []

    def circuits(self) -> dict[str, Any]:
        """The circuit breakers of the remote services, for /health."""
        return {name: breaker.status() for name, breaker in self._breakers().items()}

    def _breakers(self) -> dict[str, CircuitBreaker]:
        """Each remote service's breaker, by its name in /health."""
        chain = self.stt_fallback
        stts = zip(chain.names, chain.services, strict=True) if chain is not None else ()
        named: list[tuple[str, object]] = [("stt", self.stt)]
        named += [(n if n == "llm" else f"llm_fallback_{n}", m) for n, m in llm_chain(self.llm)]
        named += [(f"stt_fallback_{name}", service) for name, service in stts]
        named += [(n if n == "tts" else f"tts_fallback_{n}", v) for n, v in tts_chain(self.tts)]
        out: dict[str, CircuitBreaker] = {}
        for name, service in named:
            breaker = getattr(service, "breaker", None)
            if isinstance(breaker, CircuitBreaker):
                out[name] = breaker
        return out

    def refused_keys(self) -> dict[str, str]:
        """The services whose vendor refuses the key now (by circuit name), and why."""
        refused: dict[str, str] = {}
        for name, breaker in self._breakers().items():
            if breaker.refused_key:
                refused[name] = breaker.refused_key
        return refused

    def status(self) -> dict[str, Any]:
        """What /health reports about the models."""
        kinds = {role: type(getattr(self, role)).__name__ for role in ("stt", "llm", "tts")}
        embedded = self.embedded.status() if self.embedded else {}
        turn = None
        if self.turn_scorer is not None:
            turn = {"model": "Smart Turn v3.2", "pool": self.turn_scorer.pool.stats().as_dict()}
        out = {"ready": self.ready, "services": kinds, "embedded": embedded, "turn_end": turn}
        fallbacks: dict[str, Any] = {}
        if self.stt_fallback is not None:
            fallbacks["stt"] = stt_serving(self.stt, self.stt_fallback)
        if isinstance(self.tts, FallbackTTS):
            fallbacks["tts"] = tts_serving(self.tts)
        if isinstance(self.llm, FallbackLLM):
            fallbacks["llm"] = llm_serving(self.llm)
        if fallbacks:
            out["fallbacks"] = fallbacks
        return out

    @property
    def ready(self) -> bool:
        """Every embedded model in use is loaded and the first turn's prompt read (remote
        services count as ready)."""
        if self.embedded is None:
            return True
        loaded = all(m.ready for m in self.embedded.models if self.uses(m.role))
        return loaded and self.prompt_warm

    async def load(self) -> None:
        """Load and warm the embedded models in use (start-up, off the event loop)."""
        if self.embedded is None:
            return
        in_use = [m for m in self.embedded.models if self.uses(m.role)]
        for model in in_use:
            await model.get()

    def uses(self, role: str) -> bool:
        """Whether ``role`` (stt, llm, tts) runs on an embedded model (for the STT: or
        one of its fallbacks)."""
        if role == "stt" and self.stt_fallback is not None:
            if any(isinstance(s, LocalSTT) for s in self.stt_fallback.services):
                return True
        if role == "tts" and any(isinstance(s, LocalTTS) for _, s in tts_chain(self.tts)):
            return True
        if role == "llm" and any(isinstance(m, LocalLLM) for _, m in llm_chain(self.llm)):
            return True
        return isinstance(getattr(self, role), LocalSTT | LocalLLM | LocalTTS)

    async def aclose(self) -> None:
        for source in (self.mcp, self.http_tools):
            if source is not None:
                await source.aclose()
        fallbacks = self.stt_fallback.services if self.stt_fallback is not None else []
        voices = [service for _, service in tts_chain(self.tts)]
        minds = [service for _, service in llm_chain(self.llm)]
        for service in (self.stt, *minds, *voices, *fallbacks):
            close = getattr(service, "aclose", None)
            if close is not None:
                await close()
        if self.embedded is not None:
            self.embedded.shutdown()
        if self.turn_scorer is not None:
            self.turn_scorer.shutdown()


def build_services(settings: Settings, agent: Agent | None = None) -> Services:
    """The STT, LLM and TTS the settings ask for, and the shared tools (built-in,
    client-side, HTTP, MCP: the agent's are per call); embedded models load lazily."""
    embedded = None
    roles = (settings.provider("stt"), settings.provider("llm"), settings.provider("tts"))
    fallbacks = (*settings.stt_fallback, *settings.llm_fallback, *settings.tts_fallback)
    if "local" in (*roles, *fallbacks):
        model_dir = settings.embedded_model_dir(settings.data_dir)
        EmbeddedModels.configure(
            llm=settings.embedded_llm,
            stt=settings.embedded_stt,
            model_dir=model_dir,
            llm_threads=settings.embedded_llm_threads,
        )
        embedded = EmbeddedModels.shared()
    stt, stt_fallback = build_stt(settings, embedded, _breaker)
    llm, tts = build_llm(settings, embedded, _breaker), build_tts(settings, embedded, _breaker)
    logger.info(
        "models: stt={} llm={} tts={}",
        type(stt).__name__,
        type(llm).__name__,
        type(tts).__name__,
    )
    if settings.language not in CUE_LANGUAGES:
        logger.warning(
            "language {!r} has no turn-taking word cues (only {}): the end of a turn is "
            "judged by the end-of-turn model, the silence and punctuation alone",
            settings.language,
            ", ".join(CUE_LANGUAGES),
        )
    tools = default_registry(demo_tools=settings.demo_tools)
    for definition in settings.client_tools:
        tools.register(client_tool_spec(definition, settings.client_tool_timeout))
    if agent is not None:
        _announce(agent, llm)
    http = _http_tools(settings, agent, tools)
    mcp_configs = [*settings.mcp_servers, *(agent.mcp_servers if agent else ())]
    mcp = None
    if mcp_configs:
        from pipeline.tools.sources.mcp import MCPTools

        mcp = MCPTools(mcp_configs, tools)
    # Loaded (and its file checked) now: a missing model stops the start, not a turn.
    scorer = TurnScorer() if settings.turn_end == "adaptive" else None
    # The same for the noise suppressor: NoiseSuppressionError says how to install it.
    noise = shared_rnnoise() if settings.noise_suppression == "rnnoise" else None
    services = Services(stt, llm, tts, tools, embedded, SileroModel.shared(), scorer, noise)
    services.agent, services.mcp, services.http_tools = agent, mcp, http
    services.stt_fallback = stt_fallback
    return services


def _announce(agent: Agent, llm: LLMService) -> None:
    names = [spec.name for spec in agent.tools]
    logger.info("agent {} ({}): tools {}", agent.name, agent.source or "code", names or "none")
    if names and not llm.supports_tools:
        # The embedded LLM (no API key) cannot call tools: say so, or they look broken.
        logger.warning(
            "agent {}: the LLM ({}) cannot call tools, so {} are not offered; set "
            "OPENAI_API_KEY / OPENAI_BASE_URL for one that can",
            agent.name,
            type(llm).__name__,
            ", ".join(names),
        )


def _http_tools(settings: Settings, agent: Agent | None, tools: ToolRegistry) -> HTTPTools | None:
    configs = [*settings.http_tools, *(agent.http_tools if agent else ())]
    if not configs:
        return None
    http = HTTPTools(configs)  # raises on a ${VAR} that is not set: the start stops
    for spec in http.specs():
        tools.register(spec)
    return http


def _breaker(settings: Settings, service: str) -> CircuitBreaker:
    # One per service: each shared by every session, as the service itself is.
    return CircuitBreaker(service, settings.circuit_failure_threshold, settings.circuit_cooldown)


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
