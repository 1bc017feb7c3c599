"""One session's conversation: turn-taking, the context, bot turns and barge-in.

Everything enters through :meth:`Conversation.feed` — VAD events, transcriptions, playout
reports, function-call results — so turn-taking (mute, idle) sees all of it in order.
What the components decide comes out on ``events`` (an :class:`Emitter`), where the
aggregators, the bot-turn runner and any observer (RTVI, transcripts) subscribe.

Its settings (turn-taking, barge-in, preemptive replies, merging) are a
:class:`~pipeline.conversation_params.ConversationParams`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from loguru import logger

from pipeline.aggregators import AssistantAggregator, UserAggregator
from pipeline.context.llm_context import LLMContext
from pipeline.conversation_params import ConversationParams
from pipeline.deadline_timer import DeadlineTimer
from pipeline.events import (
    BotResponseEnded,
    BotStartedSpeaking,
    BotStoppedSpeaking,
    BotText,
    BotTextProgress,
    BotTextStarted,
    Emitter,
    Event,
    Interruption,
    LLMRunRequested,
    Metric,
    ServiceError,
    SpeechFalseStart,
    SpeechOnset,
    SpeechStarted,
    SpeechStopped,
    SummaryRequested,
    Transcription,
    UserTurnDiscarded,
    UserTurnEndPredicted,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.interruptions.barge_in import BargeIn, PausableOutput
from pipeline.interruptions.judge import Verdict
from pipeline.reply.bot_turn import BotTurn, turn_error
from pipeline.reply.playout_pacing import AudioOutput
from pipeline.reply.preemptive import PreemptiveReplies, foreseen
from pipeline.reply.turn_completion import Reprompt, TurnCompletionFilter
from pipeline.services.live_tts import LiveTTSService, TTSConnection
from pipeline.services.llm import FixedText, LLMService, SpeakingLLM, speaks
from pipeline.services.tts import TTSService
from pipeline.session_metrics import SessionMetrics
from pipeline.task_cancel import cancel_and_wait
from pipeline.turns import UserTurnParams, UserTurns
from pipeline.turns.clock import event_time
from pipeline.turns.merge import TurnMerger

# How often turn-taking timers are checked when no audio frame arrives to drive them.
TICK_SECONDS = 0.05


class Conversation:
    """Wires turn-taking, aggregators and bot turns for one session.

    ``output`` is the outbound audio (the paced track); register this object as its
    playout listener so that bot speaking and spoken text follow real playout.
    """

    def __init__(
        self,
        context: LLMContext,
        llm: LLMService,
        tts: TTSService | None = None,
        output: PausableOutput | None = None,
        params: ConversationParams | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        params = params or ConversationParams()
        self.context = context
        self.llm = llm
        # A live voice: one connection for the call, each answer a context of it.
        self.tts = tts.open_live() if isinstance(tts, LiveTTSService) else tts
        self.output = output
        self.tts_ahead = params.tts_ahead  # seconds of speech synthesized ahead at most
        self.clock = clock
        self.filter_incomplete_user_turns = params.filter_incomplete_user_turns
        self.turn_completion = params.turn_completion
        self._reprompt = Reprompt(self._reprompt_user)
        self.events = Emitter()
        self.metrics = SessionMetrics(params.prices)
        turn_params = params.turn_params or UserTurnParams()
        self.turns = UserTurns(
            params.turn_params,
            emit=self.events.emit,
            mute_strategies=params.mute_strategies,
            stop_strategies=turn_params.stop_strategies(self.reply_lead),
        )
        self.user = UserAggregator(context, self.feed)
        self.assistant = AssistantAggregator(context, self.feed)
        self.merger = TurnMerger(context, self.user, self.events.emit, params.merge_window)
        self._summary: asyncio.Task[None] | None = None
        self._turn: asyncio.Task[None] | None = None
        self._voiced: asyncio.Task[None] | None = None  # the last turn whose audio played
        self.replies: PreemptiveReplies | None = None
        if params.preemptive and output is not None and (tts is not None or speaks(llm)):
            self.replies = PreemptiveReplies(self._launch_held, self.feed, output)
        self._onset = 0.0  # of the user's latest speech
        self.barge_in = BargeIn(
            output,
            self.interrupt,
            self._dismiss_turn,
            self.feed,
            params.interruptions,
            enabled=params.pause_on_interruption,
            at_onset=params.pause_at_onset,
        )
        self._run_pending = False
        self._audio_next = True
        self._ticker: asyncio.Task[None] | None = None
        self._timer: DeadlineTimer | None = None  # turn-taking's next deadline, once started
        # Called just before each LLM run (not greetings): e.g. refresh the <ui_state>.
        self.before_llm_run: list[Callable[[], None]] = []
        self._subscribe()

    def _subscribe(self) -> None:
        on = self.events.on
        on(Metric, self.metrics.record)
        on(BotResponseEnded, lambda _: self.metrics.end_turn())
        # Subscription order matters: the aggregators learn that the user started
        # speaking before the barge-in handler cancels the bot.
        for event_type in AssistantAggregator.EVENTS:
            on(event_type, self.assistant.handle)
        for event_type in (UserTurnStarted, UserTurnStopped, UserTurnDiscarded):
            on(event_type, self.user.handle)
        on(UserTurnStopped, lambda e: self.merger.turn_stopped(e.t))
        # After the assistant aggregator has closed the interrupted answer.
        on(Interruption, lambda _: self.merger.interrupted())
        on(UserTurnStarted, self._on_user_turn_started)
        on(UserTurnEndPredicted, self._preempt)
        on(SpeechStarted, lambda _: self._drop_held("the user went on"))
        on(LLMRunRequested, self._on_run_requested)
        on(SummaryRequested, self._on_summary_requested)

    # -- input --------------------------------------------------------------------------

    def feed(self, event: Event) -> None:
        """Take any event from outside (VAD, STT, playout, tools) or from the aggregators."""
        self._take(event)
        if self._timer is not None:  # the event may have moved a deadline
            self._timer.arm(self.turns.next_deadline())

    def _take(self, event: Event) -> None:
        t = event_time(event)
        if t is not None:
            self.turns.advance(t)
        self._note_speech(event)
        if self._resumed_over(event):
            return
        if isinstance(event, Transcription):
            # The transcript must be in the aggregation before the turn it may end stops.
            if self.turns.muted:
                return
            self.user.handle(event)
        if not self.turns.handle(event):
            self.events.emit(event)
        if isinstance(event, SpeechStarted) and self.barge_in.held:
            # Confirmed, but no barge-in came of it (muted, a turn going on): go on.
            self.barge_in.false_start(event.t)

    def _note_speech(self, event: Event) -> None:
        """What the VAD says of the user's voice, before turn-taking sees it."""
        if isinstance(event, SpeechStarted):
            self._onset = event.t  # before the turn it starts reaches anyone
        elif isinstance(event, SpeechOnset):
            self._pause_at_onset(event.t)
        elif isinstance(event, SpeechFalseStart):
            self.barge_in.false_start(event.t)

    def _resumed_over(self, event: Event) -> bool:
        """A paused barge-in judges the speech and words that come while it waits: words
        it resumes the bot over are shown to the client but make no turn (True)."""
        if not self.barge_in.pending:
            return False
        if not isinstance(event, Transcription | SpeechStarted | SpeechStopped):
            return False
        if self.barge_in.handle(event) is Verdict.RESUME and isinstance(event, Transcription):
            self.events.emit(event)  # the client still sees what was heard
            return True  # but no turn is made of it
        return False

    def _pause_at_onset(self, t: float) -> None:
        """The first sound of what may be the user's voice: if its confirmation would
        barge in, the bot goes silent now (judged then, resumed at a false start)."""
        turns = self.turns
        if turns.muted or turns.turn_active or not self.bot_active:
            return
        starts = turns.controller.start_strategies  # a min-words start waits for words
        if any(s.name == "vad" and s.enable_interruptions for s in starts):
            self.barge_in.onset(t, self._mid_reply())

    def _mid_reply(self) -> bool:
        """The reply in progress has been heard (its output may have run dry a moment)."""
        turn = self._turn
        return turn is not None and turn is self._voiced and not turn.done()

    def tick(self) -> None:
        """Fire turn-taking timers that are due (the session calls this per audio frame)."""
        now = self.clock()
        if self.barge_in.pending or self.barge_in.held:
            self.barge_in.advance(now)
        self.turns.advance(now)
        if self._timer is not None and self._timer.passed(now):
            self._timer.arm(self.turns.next_deadline())

    # -- playout (the output's listener) -----------------------------------------------------

    def playout_started(self) -> None:
        self._voiced = self._turn
        self.feed(BotStartedSpeaking(self.clock()))

    def playout_stopped(self) -> None:
        self.feed(BotStoppedSpeaking(self.clock()))

    def segment_started(self, text: str) -> None:
        self.barge_in.played(text)
        self.feed(BotTextStarted(text))

    def segment_played(self, text: str) -> None:
        self.feed(BotText(text))

    def segment_progress(self, text: str, spoken: str) -> None:
        """Playout reached another word of the segment playing (the output's word timing):
        told to observers only, as turn-taking has nothing to learn from it."""
        self.events.emit(BotTextProgress(text, spoken))

    # -- bot turns -------------------------------------------------------------------------------

    @property
    def bot_active(self) -> bool:
        """A bot turn is generating, or its audio is still playing."""
        playing = self.output is not None and self.output.playing
        return (self._turn is not None and not self._turn.done()) or playing

    def run_llm(self, audio: bool = True) -> None:
        """Answer now (e.g. text sent by the client); ``audio=False`` answers in text only."""
        self._audio_next = audio
        self._on_run_requested(LLMRunRequested("requested"))

    def say(self, text: str) -> None:
        """Speak ``text`` as the bot (a greeting): the same path as an answer, minus the LLM."""
        if self.bot_active:
            return
        # A model that speaks itself says it in its own voice (there may be no TTS).
        fixed = self.llm.fixed(text) if isinstance(self.llm, SpeakingLLM) else FixedText(text)
        self._start_turn(fixed, completion=None, audio=True)

    def _on_run_requested(self, event: LLMRunRequested) -> None:
        if self._turn is not None and not self._turn.done():
            self._run_pending = True  # answers are serialized, never overlapped
            return
        audio, self._audio_next = self._audio_next, True
        completion = TurnCompletionFilter() if self.filter_incomplete_user_turns else None
        self._start_turn(self.llm, completion, audio)

    def _start_turn(
        self, llm: LLMService, completion: TurnCompletionFilter | None, audio: bool
    ) -> None:
        self._reprompt.cancel()
        if llm is self.llm:
            for prepare in self.before_llm_run:
                prepare()
        messages = self.context.to_openai()
        if self.replies is not None:
            plain = llm is self.llm and audio and completion is None
            held = self.replies.take(messages if plain else [], self.context.tools)
            if held is not None:
                self._turn = held
                return
        self._turn = self._launch(llm, completion, audio, messages, self.feed)

    def _launch(
        self,
        llm: LLMService,
        completion: TurnCompletionFilter | None,
        audio: bool,
        messages: list[dict[str, Any]],
        emit: Callable[[Event], None],
        output: AudioOutput | None = None,
    ) -> asyncio.Task[None]:
        tts, output = (self.tts, output or self.output) if audio else (None, None)
        turn = BotTurn(
            self.context,
            llm,
            emit,
            tts,
            output,
            completion,
            self.turn_completion,
            messages,
            ahead=self.tts_ahead,
        )
        task = asyncio.get_running_loop().create_task(turn.run(), name="bot-turn")
        task.add_done_callback(lambda task: self._turn_done(task, completion))
        return task

    def _turn_done(self, task: asyncio.Task[None], completion: TurnCompletionFilter | None) -> None:
        if task is not self._turn:
            return  # a held reply that was dropped
        if not task.cancelled():
            self._after_turn(task, completion)
        # Also after a cancel: a run asked for while the interrupted turn was still
        # unwinding (send-text barging in) waited for exactly this.
        if self._run_pending:
            self._run_pending = False
            self._on_run_requested(LLMRunRequested("queued"))

    def _after_turn(
        self, task: asyncio.Task[None], completion: TurnCompletionFilter | None
    ) -> None:
        wait = completion.reprompt_after(self.turn_completion) if completion else None
        if wait is not None and not self._run_pending:
            # The user had not finished: say nothing now, nudge them if they stay quiet.
            self._reprompt.schedule(*wait)
        exc = task.exception()
        if exc is not None:
            error = turn_error(exc)
            logger.warning("bot turn failed: {}", error)
            self.events.emit(ServiceError(error.service, str(error.cause) or repr(error.cause)))
            self.feed(BotResponseEnded())

    def _reprompt_user(self, prompt: str) -> None:
        self.context.add_message({"role": "system", "content": prompt})
        self._on_run_requested(LLMRunRequested("re-prompt"))

    def _on_user_turn_started(self, event: UserTurnStarted) -> None:
        self._reprompt.cancel()
        self._drop_held("a new user turn")
        if event.interrupt and self.bot_active:
            self.merger.barge_in(event.t)
            # Pause and judge speech the VAD heard; words (a min-words start) interrupt.
            heard = event.strategy == "vad"
            if not (heard and self.barge_in.pause(self._onset, event.t, self._mid_reply())):
                self.interrupt(event.t)  # nothing playing to pause: cancel at once

    def _dismiss_turn(self, t: float, text: str) -> None:
        """The speech over the bot was no turn: the bot goes on, nothing is answered."""
        self.merger.cancel()
        self.turns.discard(t, text)

    # -- preemptive replies ----------------------------------------------------------------

    def reply_lead(self) -> float:
        """How long before the end of a user turn a preemptive reply should start: the
        session's median LLM plus TTS time to first byte (0.4 s until measured)."""
        return self.metrics.reply_latency(default=0.4)

    def _preempt(self, event: UserTurnEndPredicted) -> None:
        message = self.user.pending_message()
        if self.replies is None or message is None or self.bot_active:
            return
        if self.filter_incomplete_user_turns:
            return  # a reply that may stay silent is not worth holding
        messages = foreseen(self.context, message, self.before_llm_run)
        self.replies.start(messages, self.context.tools)

    def _launch_held(
        self, messages: list[dict[str, Any]], emit: Callable[[Event], None], output: AudioOutput
    ) -> asyncio.Task[None]:
        return self._launch(self.llm, None, True, messages, emit, output)

    def _drop_held(self, reason: str) -> None:
        if self.replies is not None:
            self.replies.drop(reason)

    def interrupt(self, t: float | None = None) -> None:
        """Barge-in: cancel the bot turn, silence the output, close the assistant message.

        All in one step: the flush reports the words that did go out (so the assistant
        message holds only those) before the interruption closes the message.
        """
        if self._turn is not None and not self._turn.done():
            self._turn.cancel()
        self.barge_in.cancel()
        self._drop_held("interrupted")
        self._run_pending = False
        if self.output is not None:
            self.output.flush()
        self.feed(Interruption(self.clock() if t is None else t))

    # -- context summarization -----------------------------------------------------------

    def _on_summary_requested(self, event: SummaryRequested) -> None:
        if self._summary is None or self._summary.done():
            self._summary = asyncio.get_running_loop().create_task(
                self.assistant.summarize(self.llm, event.request), name="summary"
            )

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the timers that drive turn-taking between audio frames: its next deadline,
        at its time, and a periodic one when no audio comes."""
        self._timer = DeadlineTimer(self.tick, self.clock)
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever(), name="turns")

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            self.tick()

    async def close(self) -> None:
        """End of the session: stop everything; keep what was said (nothing is lost)."""
        self._reprompt.cancel()
        self._drop_held("the session ended")
        if self._timer is not None:
            self._timer.cancel()
        await cancel_and_wait([self._ticker, self._turn, self._summary])
        if self.output is not None:
            self.output.flush()
        if isinstance(self.tts, TTSConnection):
            await self.tts.aclose()
        self.user.close()
        self.assistant.close()
