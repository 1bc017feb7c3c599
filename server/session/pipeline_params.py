"""The parts of a call's voice pipeline as the settings describe them: the tools it offers,
the conversation (turn-taking, barge-in, turn completion), the VAD, the idle check-ins and
the context budget. :class:`server.session.voice.VoiceSession` wires them together; this
module only translates settings into the pipeline's own parameters, so that the wiring
reads as the data path and each setting has one place where it takes effect.
"""

from __future__ import annotations

from pipeline.audio.noise_suppression import NoiseSuppressor
from pipeline.context.budget import ContextBudgetParams
from pipeline.context.llm_context import LLMContext
from pipeline.conversation import Conversation
from pipeline.conversation_params import ConversationParams
from pipeline.hearing.vad import VADAnalyzer, VADParams
from pipeline.interruptions.barge_in import PausableOutput
from pipeline.interruptions.judge import InterruptionParams
from pipeline.realtime.service import RealtimeLLM, RealtimeModels
from pipeline.reply.turn_completion import TurnCompletionConfig
from pipeline.services.llm import LLMService
from pipeline.session_metrics import Prices
from pipeline.tools.call_tools import CallTools
from pipeline.tools.registry import ToolRegistry
from pipeline.turns import UserTurnParams
from pipeline.turns.idle_check_ins import IdleCheckInParams
from pipeline.turns.mute_names import mute_strategies
from pipeline.turns.stop_adaptive import AdaptiveStopParams
from pipeline.vision.tools import FrameSource, vision_tools
from server.rtvi.ui_worker import SessionTools, UIWorker
from server.session.model_services import Services
from server.settings import Settings


def turn_params(settings: Settings) -> UserTurnParams:
    """How user turns start and end, from the settings."""
    return UserTurnParams(
        user_turn_stop_timeout=settings.user_turn_stop_timeout,
        user_speech_timeout=settings.user_speech_timeout,
        min_words=settings.min_words_to_interrupt,
        user_idle_timeout=settings.user_idle_timeout,
        turn_end=settings.turn_end,
        adaptive=AdaptiveStopParams(
            confident=settings.turn_end_confident,
            doubtful=settings.turn_end_doubtful,
            question_wait=settings.turn_end_question_wait,
            statement_wait=settings.turn_end_statement_wait,
            max_wait=settings.turn_end_max_wait,
            score_timeout=settings.turn_end_score_timeout,
            language=settings.language,
        ),
    )


def agent_tools(services: Services, settings: Settings) -> CallTools | None:
    """The agent's tools over the shared ones, for a call with an agent whose LLM can call
    tools (the view a handoff changes); None without an agent."""
    if services.agent is None or not services.llm.supports_tools:
        return None
    return CallTools(services.tools if settings.tools_enabled else None, services.agent)


def call_tools(
    services: Services,
    settings: Settings,
    ui: UIWorker | None,
    video: FrameSource | None,
    agent: CallTools | None = None,
) -> ToolRegistry | None:
    """The tools this call offers: the agent's and the shared ones (when the LLM can call
    tools), plus look_at_camera/look_at_screen bound to its video, plus the UI tools bound
    to its UI worker. None: no tools at all (the LLM is told of none)."""
    can_call = services.llm.supports_tools
    tools: ToolRegistry | None = services.tools if settings.tools_enabled and can_call else None
    if agent is not None:
        tools = agent
    if video is not None and can_call:
        tools = SessionTools(tools)
        for spec in vision_tools(video):
            if spec.name not in tools:  # an app's own tool of that name wins
                tools.register(spec)
    if ui is not None:
        tools = ui.tool_registry(tools, can_call)
    return tools


async def warm_first_turn(services: Services, settings: Settings) -> None:
    """Read what every call's first LLM request starts with (the system prompt and the
    tools a new call offers) into the embedded LLM's prompt cache, at start-up: read cold,
    that prefix takes seconds on two cores, and the first caller would wait for it."""
    warm = getattr(services.llm, "warm", None)
    if warm is None:  # a remote LLM caches (or not) on its own side
        return
    tools = call_tools(services, settings, None, None, agent_tools(services, settings))
    services.prompt_warm = False
    try:
        await warm(settings.system_prompt, tools.openai_tools() if tools else [])
    finally:
        services.prompt_warm = True


def new_conversation(
    context: LLMContext,
    services: Services,
    settings: Settings,
    output: PausableOutput,
    llm: LLMService | None = None,
) -> Conversation:
    """The conversation (turn-taking, barge-in, bot turns) the settings ask for; ``llm``:
    the call's own model (a speech-to-speech connection), else the shared one."""
    adaptive = settings.turn_end == "adaptive"
    params = ConversationParams(
        turn_params=turn_params(settings),
        prices=Prices(input=settings.llm_price_input, output=settings.llm_price_output),
        preemptive=adaptive and settings.preemptive_replies,
        merge_window=settings.turn_merge_window,
        interruptions=InterruptionParams(
            backchannels=tuple(settings.backchannels),
            max_backchannel_seconds=settings.max_backchannel_seconds,
            false_interruption_timeout=settings.false_interruption_timeout,
        ),
        pause_on_interruption=settings.pause_on_interruption,
        pause_at_onset=settings.pause_at_onset,
        tts_ahead=settings.tts_ahead_seconds,
        mute_strategies=mute_strategies(settings.user_mute),
        filter_incomplete_user_turns=settings.turn_completion,
        turn_completion=TurnCompletionConfig(
            incomplete_short_timeout=settings.turn_completion_short_timeout,
            incomplete_long_timeout=settings.turn_completion_long_timeout,
        ),
    )
    return Conversation(context, llm or services.llm, services.tts, output, params)


def speech_model(services: Services) -> RealtimeLLM | None:
    """One call's own connection to a speech-to-speech model, if that is the LLM."""
    models = services.llm
    return models.open_session() if isinstance(models, RealtimeModels) else None


def new_vad(settings: Settings, services: Services) -> VADAnalyzer:
    """One call's VAD state over the shared model."""
    params = VADParams(
        confidence=settings.vad_confidence,
        start_secs=settings.vad_start_secs,
        stop_secs=settings.vad_stop_secs,
        pause_secs=settings.vad_pause_secs,
    )
    return VADAnalyzer(params, model=services.vad)


def new_noise_suppressor(services: Services) -> NoiseSuppressor | None:
    """One call's noise suppressor before the VAD (``PARLEY_NOISE_SUPPRESSION``), over the
    library loaded at start-up; None when off."""
    if services.noise_suppression is None:
        return None
    return NoiseSuppressor(services.noise_suppression)


def idle_check_in_params(settings: Settings) -> IdleCheckInParams | None:
    """How an idle user is checked on; None: never (``user_idle_timeout`` 0)."""
    if settings.user_idle_timeout <= 0:
        return None
    return IdleCheckInParams(
        timeout=settings.user_idle_timeout,
        prompt=settings.user_idle_prompt,
        check_ins=settings.user_idle_check_ins,
        end_call=settings.user_idle_end_call,
        goodbye=settings.user_idle_goodbye,
    )


def context_budget_params(settings: Settings) -> ContextBudgetParams:
    """The context's token limit and its summaries."""
    return ContextBudgetParams(
        max_tokens=settings.context_max_tokens,
        summarize=settings.summarizes_context(),
        summary_max_tokens=settings.context_summary_max_tokens,
        # A summary is a longer answer than a turn's first token: give it room.
        summary_timeout=3 * settings.llm_timeout,
    )
