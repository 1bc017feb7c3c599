"""One call's voice pipeline, connected to its transport and to RTVI.

inbound audio (about 20 ms a packet) → VAD → (transcriber, conversation) → bot turns →
paced track; the conversation's events go out as RTVI messages. The VAD's model runs off
the loop, batched with every other session's (:class:`pipeline.vad_batcher.VADBatcher`):
its events arrive a moment after the frame that completed them, in order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from loguru import logger

from pipeline.client_tools import ClientToolCalls, ClientToolError
from pipeline.context import LLMContext
from pipeline.context_budget import ContextBudget, ContextBudgetParams
from pipeline.conversation import Conversation
from pipeline.echo import EchoCanceller
from pipeline.frames import (
    BotPaused,
    BotResponseEnded,
    BotStoppedSpeaking,
    Event,
    Metric,
    ServiceError,
    SpeechStarted,
    Transcription,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.idle_check_ins import IdleCheckInParams, IdleCheckIns
from pipeline.image_results import ToolImages
from pipeline.interruptions import InterruptionParams
from pipeline.messages import AssistantMessage, UserMessage
from pipeline.metrics import Prices
from pipeline.tool_runner import ToolRunner
from pipeline.transcriber import Transcriber
from pipeline.turn_completion import TurnCompletionConfig, strip_markers
from pipeline.turn_scorer import TurnScoring
from pipeline.turns import UserTurnParams
from pipeline.turns.mute_names import mute_strategies
from pipeline.turns.stop_adaptive import AdaptiveStopParams
from pipeline.vad import VADAnalyzer, VADParams, VADState
from pipeline.vad_batcher import VADBatcher
from pipeline.vision import VisionContext, VisionParams
from pipeline.vision_tools import FrameSource, vision_tools
from server.media.outbound_track import OUT_RATE, PacedAudioTrack
from server.rtvi.audio import AudioLevelMeter, TTSAudioTap
from server.rtvi.events import FunctionCallReporting, RTVIEvents
from server.rtvi.ui_worker import SessionTools, UIWorker
from server.session.services import Services
from server.settings import Settings

# How often a session checks for audio that stopped arriving mid-speech.
IDLE_CHECK_SECONDS = 0.25


def _tell_all(listeners: list[Callable[[bytes], None]], frame: bytes) -> None:
    for tell in listeners:
        tell(frame)


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
        ),
    )


class VoiceSession:
    """Owns the VAD, transcriber, conversation, tool runner and RTVI observer of a call."""

    def __init__(
        self,
        services: Services,
        settings: Settings,
        output: PacedAudioTrack,
        send: Callable[[dict[str, Any]], None],
        ui: UIWorker | None = None,
        video: FrameSource | None = None,
    ) -> None:
        self.settings = settings
        # Told what a VAD event's handler raised (the session counts it); None: raise.
        self.on_fault: Callable[[str, Exception], None] | None = None
        can_call = services.llm.supports_tools
        tools = services.tools if settings.tools_enabled and can_call else None
        if video is not None and can_call:  # look_at_camera/look_at_screen, bound to this call
            tools = SessionTools(tools)
            for spec in vision_tools(video):
                if spec.name not in tools:  # an app's own tool of that name wins
                    tools.register(spec)
        if ui is not None:
            tools = ui.tool_registry(tools, can_call)  # plus the UI tools, bound to this call
        self.context = LLMContext(
            [{"role": "system", "content": settings.system_prompt}],
            tools=tools.openai_tools() if tools else None,
        )
        params = turn_params(settings)
        prices = Prices(input=settings.llm_price_input, output=settings.llm_price_output)
        # With bot-tts-audio on, the pipeline writes through a tap that also sends it.
        pipeline_output = TTSAudioTap(output, send) if settings.rtvi_bot_tts_audio else output
        adaptive = settings.turn_end == "adaptive"
        self.conversation = Conversation(
            self.context,
            services.llm,
            services.tts,
            pipeline_output,
            params,
            prices=prices,
            preemptive=adaptive and settings.preemptive_replies,
            merge_window=settings.turn_merge_window,
            interruptions=InterruptionParams(
                backchannels=tuple(settings.backchannels),
                max_backchannel_seconds=settings.max_backchannel_seconds,
                false_interruption_timeout=settings.false_interruption_timeout,
            ),
            pause_on_interruption=settings.pause_on_interruption,
            tts_ahead=settings.tts_ahead_seconds,
            mute_strategies=mute_strategies(settings.user_mute),
            filter_incomplete_user_turns=settings.turn_completion,
            turn_completion=TurnCompletionConfig(
                incomplete_short_timeout=settings.turn_completion_short_timeout,
                incomplete_long_timeout=settings.turn_completion_long_timeout,
            ),
        )
        output.listener = self.conversation
        # The end-of-turn model hears the turn at every pause (shared scorer, off the loop).
        self.turn_scoring: TurnScoring | None = None
        if adaptive and services.turn_scorer is not None:
            self.turn_scoring = TurnScoring(services.turn_scorer, self.conversation.feed)
            for kind in (UserTurnStarted, UserTurnStopped):
                self.conversation.events.on(kind, self.turn_scoring.handle)
        # The bot's own voice, cancelled in the user's audio with what was played.
        self.echo = EchoCanceller() if settings.echo_cancellation else None
        sent: list[Callable[[bytes], None]] = []
        if self.echo is not None:
            echo = self.echo
            sent.append(lambda frame: echo.played(frame, OUT_RATE, time.monotonic()))
        self.user_level: AudioLevelMeter | None = None
        if settings.rtvi_audio_levels:
            self.user_level = AudioLevelMeter("user-audio-level", send)
            bot_level = AudioLevelMeter("bot-audio-level", send)
            sent.append(lambda frame: bot_level.push(frame, active=True))
            # Playout ended, was flushed by a barge-in or paused: level 0, once.
            for kind in (BotStoppedSpeaking, BotPaused):
                self.conversation.events.on(kind, lambda _: bot_level.silence())
        if sent:
            output.on_frame_sent = lambda frame: _tell_all(sent, frame)
        self.vad = VADAnalyzer(
            VADParams(
                confidence=settings.vad_confidence,
                start_secs=settings.vad_start_secs,
                stop_secs=settings.vad_stop_secs,
            ),
            model=services.vad,
        )
        self.transcriber = Transcriber(services.stt, self._transcribed, on_error=self._stt_failed)
        # Pictures: tools' (pipeline/image_results.py), the video's (pipeline/vision.py).
        self.images = ToolImages(self.context, enabled=settings.llm_vision)
        self.images.attach(self.conversation.events)
        self.vision: VisionContext | None = None
        if video is not None:
            seeing = VisionParams(settings.vision_every_turn, settings.vision_max_images)
            self.vision = VisionContext(self.context, video, seeing)
            self.vision.attach(self.conversation)
        # ``is not None``: the UI worker's registry may start empty and get the UI tools later.
        tool_feed = self.images.feed(self.conversation.feed)
        self.tools = ToolRunner(tools, tool_feed) if tools is not None else None
        if ui is not None:
            ui.attach(self.context, self.conversation, self.tools, tools)
        if self.tools is not None:
            self.tools.attach(self.conversation.events)
        self.client_tools: ClientToolCalls | None = None
        if tools is not None:
            self.client_tools = ClientToolCalls(
                tools, self.conversation.feed, settings.client_tool_timeout
            )
            self.client_tools.attach(self.conversation.events)
        reporting = FunctionCallReporting(
            settings.function_call_report_level,
            settings.function_call_report_levels,
            tools,
            legacy=settings.rtvi_legacy_function_call,
        )
        self.rtvi = RTVIEvents(send, reporting, thoughts=settings.rtvi_bot_llm_thoughts)
        self.rtvi.subscribe(self.conversation.events)
        self._context_limits(services, settings)
        # Ends the call (the session sets it): an idle user who never answered.
        self.on_end_call: Callable[[str], None] | None = None
        self.idle: IdleCheckIns | None = None
        if settings.user_idle_timeout > 0:
            idle = IdleCheckInParams(
                timeout=settings.user_idle_timeout,
                prompt=settings.user_idle_prompt,
                check_ins=settings.user_idle_check_ins,
                end_call=settings.user_idle_end_call,
                goodbye=settings.user_idle_goodbye,
            )
            self.idle = IdleCheckIns(self.conversation, idle, self._end_call)
        # Whether the utterance in progress began while the user was muted: then it is
        # ignored whole, even where it goes on after mute ended (never a turn).
        self._muted_utterance = False
        self._idle_check: asyncio.Task[None] | None = None
        self._vad_batcher: VADBatcher | None = None

    def _context_limits(self, services: Services, settings: Settings) -> None:
        """Summaries and the token limit; the limit's hook runs after every other one
        (the UI state, the camera's picture), so it counts what they add."""
        params = ContextBudgetParams(
            max_tokens=settings.context_max_tokens,
            summarize=settings.summarizes_context(),
            summary_max_tokens=settings.context_summary_max_tokens,
            summary_timeout=3 * settings.llm_timeout,
        )
        self.context_budget = ContextBudget(
            self.context, services.llm, self.conversation.events.emit, params
        )
        self.conversation.before_llm_run.append(self.context_budget.before_llm_run)
        self.conversation.events.on(BotResponseEnded, self.context_budget.answer_ended)

    def _end_call(self, reason: str) -> None:
        if self.on_end_call is not None:
            self.on_end_call(reason)

    def start(self) -> None:
        self.conversation.start()
        self._vad_batcher = VADBatcher.for_loop(self.vad.model)
        self._vad_batcher.register(self.vad, self._vad_events)
        self._idle_check = asyncio.get_running_loop().create_task(
            self._check_idle_forever(), name="audio-idle"
        )

    # -- audio in -----------------------------------------------------------------------------

    def push_audio(self, frame: bytes) -> None:
        """16 kHz mono s16 from the transport, about 20 ms a call (every packet: keep cheap)."""
        t = time.monotonic()
        if self.echo is not None:
            frame = self.echo.process(frame, t)
        if self._vad_batcher is not None:
            self.vad.feed(frame, t)
            self._vad_batcher.submit(self.vad)  # its events come to _vad_events
        else:  # not started: no loop to batch on, so score inline
            self._vad_events(self.vad.push(frame, t))
        self.transcriber.push_audio(frame, t)
        if self.turn_scoring is not None:
            self.turn_scoring.push_audio(frame, t)
        self.conversation.tick()
        if self.user_level is not None:
            self.user_level.push(frame, self.vad.state is not VADState.QUIET)

    def _vad_events(self, events: list[Event]) -> None:
        for event in events:
            try:
                self._vad_event(event)
            except Exception as exc:  # one failing handler skips one event, not the call
                if self.on_fault is None:
                    raise
                self.on_fault(f"{type(event).__name__} handler", exc)
        if events:
            self.conversation.tick()  # timers the events armed may be due already

    def _vad_event(self, event: Event) -> None:
        if isinstance(event, SpeechStarted):
            self._muted_utterance = self.conversation.turns.muted
        if self.turn_scoring is not None:
            self.turn_scoring.handle(event)  # before the turn logic: it may end the turn
        if not self._muted_utterance:  # muted speech is not even transcribed
            self.transcriber.handle(event)
        self.conversation.feed(event)

    async def _check_idle_forever(self) -> None:
        while True:
            await asyncio.sleep(IDLE_CHECK_SECONDS)
            for event in self.vad.check_idle(time.monotonic()):
                self._vad_event(event)

    def _transcribed(self, event: Event) -> None:
        self.conversation.feed(event)
        if isinstance(event, Transcription):
            for kind, value in (
                ("ttfb", self.transcriber.last_ttfb),
                ("processing", self.transcriber.last_processing),
            ):
                if value is not None:
                    self.conversation.feed(Metric("stt", kind, value))

    def _stt_failed(self, exc: Exception) -> None:
        logger.warning("transcription failed: {}", exc)
        self.conversation.feed(ServiceError("stt", str(exc) or type(exc).__name__))

    # -- RTVI requests ------------------------------------------------------------------------

    def client_ready(self) -> None:
        """The client can hear us: greet it (if a greeting is configured)."""
        if self.settings.greeting:
            self.conversation.say(self.settings.greeting)

    def send_text(self, content: str, run_immediately: bool, audio_response: bool) -> None:
        """RTVI ``send-text``: a typed user turn, answered in speech or in text."""
        if self.conversation.bot_active and run_immediately:
            self.conversation.interrupt()
        self.conversation.user.add_text(content, run_llm=False)
        if run_immediately:
            self.conversation.run_llm(audio=audio_response)

    def client_tool_result(self, tool_call_id: str, function_name: str, result: Any) -> None:
        """RTVI ``llm-function-call-result``; raises ``ClientToolError`` when no such call
        waits for the client."""
        if self.client_tools is None:
            raise ClientToolError("this session offers no client-side tools")
        self.client_tools.resolve(tool_call_id, function_name, result)

    async def summarize_now(self) -> dict[str, Any]:
        """Summarize the older history now (RTVI ``summarize-context``, the app API)."""
        return await self.context_budget.summarize_now()

    def info(self) -> dict[str, Any]:
        """Conversation figures for the session endpoint."""
        # The context keeps the turn-completion markers; a transcript never shows them.
        transcript = [
            {"role": m.role.value, "content": text, "interrupted": m.interrupted}
            if isinstance(m, AssistantMessage)
            else {"role": m.role.value, "content": text}
            for m in self.context.messages
            if isinstance(m, UserMessage | AssistantMessage) and (text := _shown(m))
        ]
        info: dict[str, Any] = {
            "messages": len(self.context.messages),
            "transcript": transcript,
            "metrics": self.conversation.metrics.summary(),
            "context": self.context_budget.info(),
        }
        if self.vision is not None:
            info["vision"] = {
                "turn_pictures": self.vision.turn_frames,
                "tool_pictures": self.images.shown,
                "dropped": self.vision.dropped,
            }
        if self.echo is not None:
            detector = self.echo.detector
            info["echo"] = {
                "path": detector.state.value,
                "delay": detector.delay,
                "last_peak": round(detector.last_peak, 3),
                "frames_cancelled": self.echo.cancelled,
            }
        return info

    async def close(self) -> None:
        """Stop every task; what was said stays in the context."""
        if self._vad_batcher is not None:
            self._vad_batcher.unregister(self.vad)
        if self._idle_check is not None:
            self._idle_check.cancel()
            await asyncio.gather(self._idle_check, return_exceptions=True)
        await self.transcriber.close()
        if self.idle is not None:
            self.idle.close()
        await self.context_budget.close()
        if self.turn_scoring is not None:
            await self.turn_scoring.close()
        if self.client_tools is not None:
            self.client_tools.close()
        if self.tools is not None:
            await self.tools.close()
        await self.conversation.close()


def _shown(message: UserMessage | AssistantMessage) -> str:
    """A message's text as a transcript shows it: without turn-completion markers."""
    text = message.text_content()
    return strip_markers(text) if isinstance(message, AssistantMessage) else text
