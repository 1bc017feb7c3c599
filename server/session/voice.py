"""One call's voice pipeline, connected to its transport and to RTVI.

inbound audio (about 20 ms a packet) → hearing (echo, VAD, transcriber, end-of-turn model:
:mod:`pipeline.hearing.inbound`) → conversation → bot turns → paced track; the
conversation's events go out as RTVI messages.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from loguru import logger

from pipeline.audio.echo import EchoCanceller, EchoPath
from pipeline.context.budget import ContextBudget
from pipeline.context.llm_context import LLMContext
from pipeline.events import (
    BotPaused,
    BotStoppedSpeaking,
    Event,
    Metric,
    ServiceError,
    Transcription,
    UserSpeechDiscarded,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.hearing.discards import SpeechLedger
from pipeline.hearing.inbound import Hearing, TurnLogic
from pipeline.hearing.realtime_input import RealtimeInput
from pipeline.hearing.transcriber import Transcriber
from pipeline.hearing.turn_scorer import TurnScoring
from pipeline.messages import AssistantMessage, Message, UserMessage
from pipeline.realtime.service import RealtimeLLM
from pipeline.reply.turn_completion import strip_markers
from pipeline.task_cancel import cancel_and_wait
from pipeline.tools.client import ClientToolCalls, ClientToolError
from pipeline.tools.registry import ToolRegistry
from pipeline.tools.runner import ToolRunner
from pipeline.turns.idle_check_ins import IdleCheckIns
from pipeline.turns.keypad import Keypad
from pipeline.turns.merge import TypedTurnParams, TypedTurns
from pipeline.vision.camera import VisionContext, VisionParams
from pipeline.vision.image_results import ToolImages
from pipeline.vision.tools import FrameSource
from server.media.outbound_track import OUT_RATE, PacedAudioTrack
from server.rtvi.audio import AudioLevelMeter, TTSAudioTap
from server.rtvi.events import FunctionCallReporting, RTVIEvents
from server.rtvi.ui_worker import UIWorker
from server.rtvi.versions import ClientProtocol
from server.session.model_services import Services
from server.session.pipeline_params import (
    agent_tools,
    call_tools,
    context_budget_params,
    idle_check_in_params,
    new_conversation,
    new_noise_suppressor,
    new_vad,
    speech_model,
)
from server.settings import Settings

# How often a session checks for audio that stopped arriving mid-speech.
IDLE_CHECK_SECONDS = 0.25
# The words of speech the STT failed on, when a speech-to-speech model heard its audio.
UNTRANSCRIBED = "(speech not transcribed)"


def _tell_all(listeners: list[Callable[[bytes], None]], frame: bytes) -> None:
    for tell in listeners:
        tell(frame)


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
        client_protocol: ClientProtocol | None = None,
    ) -> None:
        """``client_protocol``: the RTVI protocol the client is served (its handler's; 1.x
        if None)."""
        self.settings = settings
        # Ends the call (the session sets it): an idle user who never answered.
        self.on_end_call: Callable[[str], None] | None = None
        # The agent's tools over the shared ones (a handoff swaps the agent), then the
        # call's own (camera, UI): the registry the LLM is offered.
        self.agent_tools = agent_tools(services, settings)
        tools = self.registry = call_tools(services, settings, ui, video, self.agent_tools)
        self.context = LLMContext(
            [{"role": "system", "content": settings.system_prompt}],
            tools=tools.openai_tools() if tools else None,
        )
        # With bot-tts-audio on, the pipeline writes through a tap that also sends it.
        pipeline_output = TTSAudioTap(output, send) if settings.rtvi_bot_tts_audio else output
        self.speech_model = speech_model(services)  # PARLEY_LLM=realtime: one per call
        self.conversation = new_conversation(self.context, services, settings, pipeline_output,
                                             self.speech_model)  # fmt: skip
        output.listener = self.conversation
        self._protocol = client_protocol
        output.on_progress = self._word_progress
        # Handlers below subscribe to the conversation's events in this order, after its
        # own: the order they hear each event in.
        self.turn_scoring = self._turn_scoring(services, settings)
        self.echo, self.user_level = self._playout_taps(settings, output, send)
        self.vad = new_vad(settings, services)
        self.transcriber = self._transcriber(services, settings)
        self.images, self.vision = self._pictures(settings, video)
        self.tools, self.client_tools = self._tool_calls(settings, tools, ui)
        self.rtvi = self._rtvi_events(settings, tools, send, client_protocol)
        self._context_limits(services, settings)
        self.typed = self._typed_turns(settings)
        # A phone caller's keys: entries as typed turns, within their budget (keypad.py).
        self.keypad = Keypad(self.typed.add, self.conversation.events.emit,
                             settings.telephony_end_digit)  # fmt: skip
        idle = idle_check_in_params(settings)
        self.idle = IdleCheckIns(self.conversation, idle, self._end_call) if idle else None
        # Speech that made no turn, reported with why (pipeline/hearing/discards.py).
        decider = self.conversation.barge_in.decider
        self.discards = SpeechLedger(self.conversation.events, lambda: decider.reason)
        conversation = self.conversation
        # Looked up at each call: a test (or a wrapper) may replace the conversation's feed.
        turns = TurnLogic(self._heard, lambda: conversation.tick(),
                          lambda: conversation.turns.muted)  # fmt: skip
        level = self.user_level.push if self.user_level is not None else None
        hears = (self.vad, self._recorder(self.speech_model), turns, self.discards, self.echo,
                 self.turn_scoring)  # fmt: skip
        self.hearing = Hearing(*hears, level, new_noise_suppressor(services))
        self._idle_check: asyncio.Task[None] | None = None

    @property
    def on_fault(self) -> Callable[[str, Exception], None] | None:
        """Told what a VAD event's handler raised (the session counts it); None: raise."""
        return self.hearing.on_fault

    @on_fault.setter
    def on_fault(self, tell: Callable[[str, Exception], None] | None) -> None:
        self.hearing.on_fault = tell

    def _turn_scoring(self, services: Services, settings: Settings) -> TurnScoring | None:
        """The end-of-turn model hears the turn at every pause (shared scorer, off the loop)."""
        if settings.turn_end != "adaptive" or services.turn_scorer is None:
            return None
        scoring = TurnScoring(services.turn_scorer, self.conversation.feed)
        for kind in (UserTurnStarted, UserTurnStopped):
            self.conversation.events.on(kind, scoring.handle)
        return scoring

    def _playout_taps(
        self, settings: Settings, output: PacedAudioTrack, send: Callable[[dict[str, Any]], None]
    ) -> tuple[EchoCanceller | None, AudioLevelMeter | None]:
        """What hears each frame the track plays: the echo canceller (the bot's own voice,
        cancelled in the user's audio with what was played as reference) and the bot's
        level meter. Returns the canceller and the user's level meter."""
        echo = EchoCanceller() if settings.echo_cancellation else None
        sent: list[Callable[[bytes], None]] = []
        if echo is not None:
            sent.append(lambda frame: echo.played(frame, OUT_RATE, time.monotonic()))
            # No echo path: what sounds like the bot's last words is the user's.
            self.conversation.barge_in.echo_possible = lambda: echo.state is not EchoPath.ABSENT
        user_level: AudioLevelMeter | None = None
        if settings.rtvi_audio_levels:
            user_level = AudioLevelMeter("user-audio-level", send)
            bot_level = AudioLevelMeter("bot-audio-level", send)
            sent.append(lambda frame: bot_level.push(frame, active=True))
            # Playout ended, was flushed by a barge-in or paused: level 0, once.
            for kind in (BotStoppedSpeaking, BotPaused):
                self.conversation.events.on(kind, lambda _: bot_level.silence())
        if sent:
            output.on_frame_sent = lambda frame: _tell_all(sent, frame)
        return echo, user_level

    def _pictures(
        self, settings: Settings, video: FrameSource | None
    ) -> tuple[ToolImages, VisionContext | None]:
        """Pictures: tools' (pipeline/vision/image_results.py), the video's
        (pipeline/vision/camera.py)."""
        images = ToolImages(self.context, enabled=settings.llm_vision)
        images.attach(self.conversation.events)
        if video is None:
            return images, None
        seeing = VisionParams(settings.vision_every_turn, settings.vision_max_images)
        vision = VisionContext(self.context, video, seeing)
        vision.attach(self.conversation)
        return images, vision

    def _tool_calls(
        self, settings: Settings, tools: ToolRegistry | None, ui: UIWorker | None
    ) -> tuple[ToolRunner | None, ClientToolCalls | None]:
        """The runner of server-side tools and the calls waiting for the client."""
        runner: ToolRunner | None = None
        # ``is not None``: the UI worker's registry may start empty and get the UI tools later.
        if tools is not None:
            runner = ToolRunner(tools, self.images.feed(self.conversation.feed))
        if ui is not None:
            ui.attach(self.context, self.conversation, runner, tools)
        if runner is not None:
            runner.attach(self.conversation.events)
        if tools is None:
            return runner, None
        client = ClientToolCalls(tools, self.conversation.feed, settings.client_tool_timeout)
        client.attach(self.conversation.events)
        return runner, client

    def _rtvi_events(
        self,
        settings: Settings,
        tools: ToolRegistry | None,
        send: Callable[[dict[str, Any]], None],
        client_protocol: ClientProtocol | None,
    ) -> RTVIEvents:
        """The conversation's events, told to the client as RTVI messages."""
        reporting = FunctionCallReporting(
            settings.function_call_report_level,
            settings.function_call_report_levels,
            tools,
            legacy=settings.rtvi_legacy_function_call,
        )
        thoughts = settings.rtvi_bot_llm_thoughts
        rtvi = RTVIEvents(send, reporting, thoughts=thoughts, client_protocol=client_protocol)
        rtvi.subscribe(self.conversation.events)
        return rtvi

    def _context_limits(self, services: Services, settings: Settings) -> None:
        """Summaries and the token limit; the limit's hook runs after every other one
        (the UI state, the camera's picture), so it counts what they add."""
        self.context_budget = ContextBudget(
            self.context,
            services.llm,
            self.conversation.events.emit,
            context_budget_params(settings),
        )
        self.conversation.before_llm_run.append(self.context_budget.before_llm_run)
        self.context_budget.attach(self.conversation.events)  # and the limit on growth

    def _typed_turns(self, settings: Settings) -> TypedTurns:
        """send-text gathered into turns, within the session's typed-turn budget."""
        params = TypedTurnParams(
            window=settings.typed_turn_window,
            rate=settings.typed_turn_rate,
            burst=settings.typed_turn_burst,
            max_chars=settings.max_text_chars,
        )
        typed = TypedTurns(self.conversation, self.conversation.events.emit, params)
        typed.attach(self.conversation.events)
        return typed

    def _transcriber(self, services: Services, settings: Settings) -> Transcriber:
        # With a speech-to-speech model, speech the STT failed on is still a turn: the
        # model heard its audio.
        unheard = UNTRANSCRIBED if self.speech_model is not None else None
        return Transcriber(services.stt, self._transcribed, on_error=self._stt_failed,
                           streaming=settings.stt_streaming, fallback=services.stt_fallback,
                           unheard=unheard)  # fmt: skip

    def _end_call(self, reason: str) -> None:
        if self.on_end_call is not None:
            self.on_end_call(reason)

    def _recorder(self, model: RealtimeLLM | None) -> Transcriber | RealtimeInput:
        """What hears each utterance: the STT, and the speech-to-speech model if one."""
        if model is None:
            return self.transcriber

        def discard(event: UserSpeechDiscarded) -> None:
            if event.reason != "stt_error":  # the words failed, not the audio: answered
                model.discard(event.onset)

        self.conversation.events.on(UserSpeechDiscarded, discard)
        return RealtimeInput(self.transcriber, model)

    def start(self) -> None:
        if self.speech_model is not None:
            self.speech_model.start()
        self.conversation.start()
        self.hearing.start()
        self._idle_check = asyncio.get_running_loop().create_task(
            self._check_idle_forever(), name="audio-idle"
        )

    # -- audio in -----------------------------------------------------------------------------

    def push_audio(self, frame: bytes) -> None:
        """16 kHz mono s16 from the transport, about 20 ms a call (pipeline/hearing/)."""
        self.hearing.push_audio(frame)

    def _word_progress(self, text: str, spoken: str) -> None:
        # Word by word, for RTVI 2 clients only: nobody else reads it, and the playout
        # loop that calls this must stay light.
        if self._protocol is not None and self._protocol.major >= 2:
            self.conversation.segment_progress(text, spoken)

    def _heard(self, event: Event) -> None:
        """What hearing tells the conversation; the client hears of the VAD's own start
        and stop first (RTVI 2), whatever turn-taking or a mute then makes of them."""
        self.rtvi.vad(event)
        self.conversation.feed(event)

    async def _check_idle_forever(self) -> None:
        while True:
            await asyncio.sleep(IDLE_CHECK_SECONDS)
            self.hearing.check_idle(time.monotonic())

    def _transcribed(self, event: Event) -> None:
        if isinstance(event, Transcription):  # dropped while muted, unless a pause judges it
            conversation = self.conversation
            self.discards.transcribed(
                event, conversation.turns.muted and not conversation.barge_in.pending
            )
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
        """RTVI ``send-text``: typed user text, answered in speech or in text. Texts close
        together are one turn (:class:`pipeline.turns.merge.TypedTurns`); raises
        ``TypedTextRefused`` past the session's typed-turn budget."""
        self.typed.add(content, run_immediately, audio_response)

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
        """Conversation figures for the session endpoint and ``session-info``: the latest
        transcript messages only (``PARLEY_INFO_TRANSCRIPT_*``), and how many were left out."""
        settings, pad = self.settings, self.keypad
        transcript, omitted = _latest_transcript(
            self.context.messages, settings.info_transcript_messages, settings.info_transcript_bytes
        )
        info: dict[str, Any] = {
            "messages": len(self.context.messages),
            "transcript": transcript,
            "transcript_omitted": omitted,
            "metrics": self.conversation.metrics.summary(),
            "context": self.context_budget.info(),
            "typed_turns": {"merged": self.typed.merged, "refused": self.typed.refused},
            "keypad": {"pressed": pad.pressed, "entries": pad.entries, "refused": pad.refused},
            "discarded_speech": dict(self.discards.counts),
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
                "frames_passed_unknown": self.echo.passed,
            }
        return info

    async def close(self) -> None:
        """Stop every task; what was said stays in the context."""
        self.hearing.stop()
        await cancel_and_wait([self._idle_check])
        # Speech still being recorded or transcribed goes with the call: reported.
        self.discards.call_ended(self.transcriber.pending + int(self.transcriber.recording))
        await self.transcriber.close()
        if self.idle is not None:
            self.idle.close()
        self.typed.close()  # what was typed and not yet sent stays in the context
        self.keypad.close()
        await self.context_budget.close()
        if self.turn_scoring is not None:
            await self.turn_scoring.close()
        if self.client_tools is not None:
            self.client_tools.close()
        if self.tools is not None:
            await self.tools.close()
        await self.conversation.close()
        if self.speech_model is not None:
            await self.speech_model.close()


def _latest_transcript(
    messages: list[Message], max_messages: int, max_bytes: int
) -> tuple[list[dict[str, Any]], int]:
    """The latest user and assistant messages within ``max_messages`` and ``max_bytes`` of
    text, oldest first, and how many earlier ones were left out."""
    shown = [m for m in messages if isinstance(m, UserMessage | AssistantMessage)]
    kept: list[dict[str, Any]] = []
    room, stop = max_bytes, 0
    for stop in range(len(shown), 0, -1):
        m = shown[stop - 1]
        text = _shown(m)
        if not text:
            continue
        size = len(text.encode("utf-8", "replace"))
        if len(kept) >= max_messages or (size > room and kept):
            break
        entry: dict[str, Any] = {"role": m.role.value, "content": text}
        if size > room:  # the newest alone is too long: its start, marked as cut
            entry["content"] = text.encode("utf-8", "replace")[:room].decode("utf-8", "ignore")
            entry["cut"] = True
        if isinstance(m, AssistantMessage):
            entry["interrupted"] = m.interrupted
        kept.append(entry)
        room -= size
    else:
        stop = 0  # every message was looked at
    omitted = sum(1 for m in shown[:stop] if m.text_content())
    return kept[::-1], omitted


def _shown(message: UserMessage | AssistantMessage) -> str:
    """A message's text as a transcript shows it: without turn-completion markers."""
    text = message.text_content()
    return strip_markers(text) if isinstance(message, AssistantMessage) else text
