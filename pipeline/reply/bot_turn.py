"""One bot turn — LLM stream → sentences → TTS → outbound audio — as one cancellable task.

The LLM stream feeds a small queue of sentences; a second task synthesizes each one
while the LLM goes on, writing audio (tagged with its text) to the output. Cancelling the
turn cancels both: ``aclosing`` closes the LLM and TTS streams (which closes their HTTP
requests or stops their workers), and the caller flushes the output. Nothing of the turn
survives the cancellation, so a barge-in never hears stale audio.

Synthesis runs at most ``ahead`` seconds before playout (a
:class:`~pipeline.reply.playout_pacing.PlayoutPacer` writes the audio and holds the next
sentence back while that much is unplayed, paused or held), so a long answer buffers
seconds, not minutes, and a barge-in wastes little synthesis. The LLM stream is read at
its own pace: its text is small (capped by the token limit), the provider generates it
whether or not it is read, and holding the read back would only keep a pooled HTTP
connection open through the whole playout and stretch the LLM's timing metrics.

A failed model call ends the turn, not the session: the turn emits a
:class:`~pipeline.events.ServiceError` at once, and then ends as a finished answer
would. What already went to the output plays to its end (an LLM that fails mid-answer
still gets its complete sentences spoken), so the assistant message holds exactly what
the user heard; the user's message stays in the context and the next turn starts from
there. Tool calls of a failed stream are dropped: its arguments cannot be trusted.

Tool calls are announced (:class:`~pipeline.events.FunctionCallsStarted`) as soon as the
LLM stream has ended, not after the preamble spoken with them has played: a call's
latency must not include the preamble. A barge-in during the preamble then cancels the
ordinary calls and leaves async tools running (the assistant aggregator does both).

Reasoning (:class:`~pipeline.services.llm.ReasoningDelta`) becomes thought events
(``LLMThoughtStarted`` / ``LLMThoughtText`` / ``LLMThoughtEnded``, the last at the first
text or tool call, or at the end of the stream) and never reaches the sentences, the
TTS or the spoken text; ``append_to_context`` comes from the LLM service's
``thoughts_in_context``.

A turn whose user message has already been followed by ``MAX_TOOL_ROUNDS`` rounds of tool
calls asks with ``tool_choice="none"``: the model must answer from what it has. A small
model can call the same tool again after each result (seen: the embedded Qwen calling
get_weather twenty times for one question); without a bound, one question would hold
the LLM, and the caller, for as long as the call lasts.

A model that answers in speech itself (a speech-to-speech model,
:class:`~pipeline.services.llm.SpeakingLLM`) has no TTS after it: its audio goes straight
to the output with its transcript's words (:mod:`pipeline.reply.spoken_audio`), and a cut
turn tells the model how much of the answer the user heard.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

from loguru import logger

from pipeline.context.llm_context import LLMContext
from pipeline.events import (
    BotResponseEnded,
    BotText,
    Event,
    FunctionCall,
    FunctionCallsStarted,
    LLMMarker,
    LLMResponseEnded,
    LLMResponseStarted,
    LLMText,
    LLMThoughtEnded,
    LLMThoughtStarted,
    LLMThoughtText,
    Metric,
    ServiceError,
    TTSStarted,
    TTSStopped,
)
from pipeline.messages import Usage
from pipeline.reply.playout_pacing import DEFAULT_TTS_AHEAD, AudioOutput, PlayoutPacer
from pipeline.reply.sentences import SentenceAggregator
from pipeline.reply.spoken_audio import SpokenAudio
from pipeline.reply.turn_completion import (
    TurnCompletionConfig,
    TurnCompletionFilter,
    with_instructions,
)
from pipeline.services.live_tts import SpokenText, TTSConnection, TTSContext
from pipeline.services.llm import (
    AudioDelta,
    LLMChunk,
    LLMService,
    ReasoningDelta,
    TextDelta,
    ToolCallRequest,
    UsageReport,
    speaks,
)
from pipeline.services.tts import TTSService

MAX_TOOL_ROUNDS = 5  # tool-call rounds after one user message before the model must answer


def tool_rounds(messages: list[dict[str, Any]]) -> int:
    """Assistant messages with tool calls since the last user message."""
    rounds = 0
    for message in reversed(messages):
        if message.get("role") == "user":
            break
        rounds += message.get("role") == "assistant" and bool(message.get("tool_calls"))
    return rounds


class TurnError(Exception):
    """A model service failed mid-turn; ``service`` says which ("llm" or "tts")."""

    def __init__(self, service: str, cause: BaseException) -> None:
        super().__init__(f"{service}: {type(cause).__name__}: {cause}")
        self.service = service
        self.cause = cause


def turn_error(exc: BaseException) -> TurnError:
    """The first :class:`TurnError` inside ``exc`` (task groups wrap their failures)."""
    if isinstance(exc, TurnError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            return turn_error(inner)
    return TurnError("pipeline", exc)


class BotTurn:
    """Runs one LLM response to the end of its playout; emits what happens as events."""

    def __init__(
        self,
        context: LLMContext,
        llm: LLMService,
        emit: Callable[[Event], None],
        tts: TTSService | TTSConnection | None = None,
        output: AudioOutput | None = None,
        completion: TurnCompletionFilter | None = None,
        completion_config: TurnCompletionConfig | None = None,
        messages: list[dict[str, Any]] | None = None,
        ahead: float = DEFAULT_TTS_AHEAD,
    ) -> None:
        self.context = context
        # What the LLM is asked with: the context now, unless the caller computed it (a
        # preemptive reply runs on the context as it will be once the user's turn ends).
        self.messages = messages if messages is not None else context.to_openai()
        self.llm = llm
        self.tts = tts if output is not None else None
        self.output = output
        # Writes the turn's audio and holds synthesis to ``ahead`` seconds before playout.
        self._pacer = PlayoutPacer(output, ahead) if output is not None else None
        self._emit = emit
        self._completion = completion
        self._completion_config = completion_config or TurnCompletionConfig()
        self.tool_calls: list[ToolCallRequest] = []
        self.error: TurnError | None = None  # why the turn failed, if it did
        self._llm_done = False
        # What the LLM used and why it stopped: on LLMResponseEnded, for the message.
        self.usage = Usage()
        self._stream: object = None
        self._thought_chars: int | None = None  # characters of the thought going on, if one
        # A model that answers in speech: its audio straight to the output, no TTS.
        self._spoken: SpokenAudio | None = None
        if speaks(llm) and output is not None:
            self.tts = None
            self._spoken = SpokenAudio(output)

    async def run(self) -> None:
        self._emit(LLMResponseStarted())
        try:
            await self._answer()
        except asyncio.CancelledError:
            if self._spoken is not None:  # cut: the model learns what the user heard
                heard = getattr(self.llm, "heard", None)
                if heard is not None:
                    heard(self._stream, self._spoken.heard())
                if self._spoken.started:
                    self._emit(TTSStopped())
            raise
        self._emit(BotResponseEnded())

    async def _answer(self) -> None:
        try:
            if self.tts is None:
                await self._generate(None)
            else:
                sentences: asyncio.Queue[str | None] = asyncio.Queue()
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._speak(sentences))
                    await self._generate(sentences)
        except Exception as exc:  # a task group's failures arrive as an ExceptionGroup
            self._failed(turn_error(exc))
            self._llm_ended()  # a TTS failure cancelled the LLM: the client still hears so
        if self._spoken is not None:
            self._spoken.finish()
            if self._spoken.started:
                self._emit(TTSStopped())
        if self.tts is not None or self._spoken is not None:
            await self._played_out()

    def _llm_ended(self) -> None:
        if not self._llm_done:
            self._llm_done = True
            self._emit(LLMResponseEnded(self.usage, self._stop_reason()))

    def _stop_reason(self) -> str:
        """Why the LLM stopped: "error" if the turn failed, else the provider's
        ``finish_reason``, else what the stream showed (a service that does not say)."""
        if self.error is not None:
            return "error"
        reason = getattr(self._stream, "finish_reason", None)
        if reason:
            return str(reason)
        return "tool_calls" if self.tool_calls else "stop"

    def _failed(self, error: TurnError) -> None:
        if self.error is not None:
            return  # the first failure is the one to report
        self.error = error
        logger.warning("bot turn failed: {}", error)
        if error.service == "llm":
            self.tool_calls.clear()
        self._emit(ServiceError(error.service, str(error.cause) or repr(error.cause)))

    async def _generate(self, sentences: asyncio.Queue[str | None] | None) -> None:
        splitter = SentenceAggregator()
        tools = self.context.tools if self.llm.supports_tools else None
        tool_choice = self.context.tool_choice if tools else None
        messages = self.messages
        if tools and tool_rounds(messages) >= MAX_TOOL_ROUNDS:
            tool_choice = "none"
        if self._completion is not None:
            messages = with_instructions(messages, self._completion_config.instructions)
        stream = self._stream = self.llm.stream(messages, tools, tool_choice)
        started = time.monotonic()
        first = True
        try:
            async with aclosing(stream) as chunks:
                async for chunk in chunks:
                    if first and not isinstance(chunk, UsageReport):
                        first = False
                        self._metric("llm", "ttfb", time.monotonic() - started)
                    self._chunk(chunk, splitter, sentences)
            self._thought_ended()
            if self._completion is not None:
                self._text(self._completion.finish(), splitter, sentences, filtered=True)
            self._metric("llm", "processing", time.monotonic() - started)
            self._llm_ended()
            # The calls start now, while the preamble is still being spoken: a call's
            # latency must not include the preamble's playout.
            self._announce_tool_calls()
            last = splitter.flush()
            if sentences is not None:
                if last:
                    sentences.put_nowait(last)
                sentences.put_nowait(None)
        except Exception as exc:
            # The sentences already queued are still spoken; the unfinished one is not.
            self._thought_ended()
            self._failed(TurnError("llm", exc))
            self._llm_ended()
            if sentences is not None:
                sentences.put_nowait(None)
        except BaseException:
            if sentences is not None:
                sentences.put_nowait(None)
            raise

    def _chunk(
        self,
        chunk: LLMChunk,
        splitter: SentenceAggregator,
        sentences: asyncio.Queue[str | None] | None,
    ) -> None:
        if isinstance(chunk, ReasoningDelta):
            self._thought(chunk.text)
            return
        if isinstance(chunk, TextDelta):
            self._thought_ended()
            self._text(chunk.text, splitter, sentences)
        elif isinstance(chunk, ToolCallRequest):
            self._thought_ended()
            self.tool_calls.append(chunk)
        elif isinstance(chunk, AudioDelta):
            if self._spoken is not None:
                if not self._spoken.started:
                    self._emit(TTSStarted())
                self._spoken.audio(chunk.pcm, chunk.sample_rate)
        elif isinstance(chunk, UsageReport):
            self.context.add_usage(chunk.usage)
            self.usage = self.usage + chunk.usage
            self._metric("llm", "tokens", chunk.usage)
            if chunk.reasoning_tokens:
                self._metric("llm", "reasoning_tokens", chunk.reasoning_tokens)

    def _thought(self, text: str) -> None:
        """Reasoning goes out as thought events only: never to the sentences, the TTS
        or the spoken text (the aggregator keeps it in the context if the LLM says so)."""
        if not text:
            return
        if self._thought_chars is None:
            self._thought_chars = 0
            keep = bool(getattr(self.llm, "thoughts_in_context", False))
            self._emit(LLMThoughtStarted(llm=self._model("llm"), append_to_context=keep))
        self._thought_chars += len(text)
        self._emit(LLMThoughtText(text))

    def _thought_ended(self) -> None:
        if self._thought_chars is None:
            return
        chars, self._thought_chars = self._thought_chars, None
        self._emit(LLMThoughtEnded())
        self._metric("llm", "thought_characters", chars)

    def _text(
        self,
        text: str,
        splitter: SentenceAggregator,
        sentences: asyncio.Queue[str | None] | None,
        filtered: bool = False,
    ) -> None:
        if self._completion is not None and not filtered:
            seen = self._completion.marker
            text = self._completion.feed(text)
            if self._completion.marker != seen:  # the context keeps it (never spoken)
                self._emit(LLMMarker(self._completion.marker))
        if not text:
            return
        self._emit(LLMText(text))
        if self._spoken is not None:
            self._spoken.text(text)
            return
        if sentences is None:
            self._emit(BotText(text, spoken=False, includes_spaces=True))
            return
        for sentence in splitter.push(text):
            sentences.put_nowait(sentence)

    async def _speak(self, sentences: asyncio.Queue[str | None]) -> None:
        assert self.tts is not None and self._pacer is not None
        started = False
        # A call's voice connection: the answer's sentences go to one context of it.
        context = self.tts.context() if isinstance(self.tts, TTSConnection) else None
        try:
            while (sentence := await sentences.get()) is not None:
                if not started:
                    started = True
                    self._emit(TTSStarted())
                # Back-pressure: wait while the turn is far enough ahead of playout.
                await self._pacer.room()
                await self._say(sentence, context)
        except BaseException:
            if context is not None:
                context.cancel()  # a barge-in or a failure: the vendor stops at once
            raise
        else:
            if context is not None:
                context.close()
        finally:
            if started:
                self._emit(TTSStopped())

    async def _say(self, sentence: str, context: TTSContext | None) -> None:
        assert self.tts is not None and self._pacer is not None
        first = True
        started = time.monotonic()
        self._metric("tts", "characters", len(sentence))
        # A live voice writes its word times into the text; the output reads them there.
        text = SpokenText(sentence)
        try:
            if context is not None:
                stream = context.say(text)
            else:
                assert not isinstance(self.tts, TTSConnection)
                stream = self.tts.synthesize(sentence)
            async with aclosing(stream) as audio:
                async for pcm in audio:
                    if first:
                        self._metric("tts", "ttfb", time.monotonic() - started)
                    # The sentence's text rides on its first chunk; the output counts the
                    # chunks after it as the same segment.
                    self._pacer.write(pcm, self.tts.sample_rate, text if first else None)
                    first = False
        except Exception as exc:
            raise TurnError("tts", exc) from exc
        self._metric("tts", "processing", time.monotonic() - started)

    async def _played_out(self) -> None:
        assert self.output is not None
        done = asyncio.Event()
        self.output.mark(done.set)
        await done.wait()

    def _model(self, service: str) -> str:
        return str(getattr(self.llm if service == "llm" else self.tts, "model", "") or "")

    def _metric(self, service: str, kind: str, value: object) -> None:
        self._emit(Metric(service, kind, value, self._model(service)))

    def _announce_tool_calls(self) -> None:
        if not self.tool_calls:
            return
        group = uuid.uuid4().hex if len(self.tool_calls) > 1 else None
        calls = tuple(
            FunctionCall(c.tool_call_id, c.name, c.arguments, group_id=group)
            for c in self.tool_calls
        )
        self._emit(FunctionCallsStarted(calls))
