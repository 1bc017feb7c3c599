"""One conversation on the real paced track, its LLM and TTS the OpenAI-compatible
services talking to the stub on 127.0.0.1; VAD events, transcripts and end-of-turn scores
fed as the session feeds them, on the real clock. Used by the conversation-level tests."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Self

from pipeline.context.llm_context import LLMContext
from pipeline.conversation import Conversation
from pipeline.conversation_params import ConversationParams
from pipeline.events import (
    BotPaused,
    BotResumed,
    BotStartedSpeaking,
    BotStoppedSpeaking,
    Event,
    Interruption,
    LLMResponseStarted,
    PreemptiveReplyEnded,
    SpeechOnset,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    TurnEndScore,
    UserTranscript,
    UserTurnDiscarded,
    UserTurnEndPredicted,
    UserTurnMerged,
    UserTurnStopped,
)
from pipeline.services.openai_llm import OpenAILLM
from pipeline.services.openai_tts import OpenAITTS
from pipeline.task_cancel import cancel_and_wait
from pipeline.turns import UserTurnParams
from pipeline.turns.stop_adaptive import AdaptiveStopParams
from server.media.outbound_track import PacedAudioTrack
from testkit.openai_stub import OpenAIStub

CHAT = "/v1/chat/completions"
# Short waits so the tests are quick: a statement the model calls done ends 0.5 s after
# its speech; a reply starts (held) 0.3 s before that.
PARAMS = UserTurnParams(
    turn_end="adaptive", adaptive=AdaptiveStopParams(statement_wait=(0.5, 1.0), lead=0.3)
)


class Running:
    """A conversation whose paced track is drained as aiortc would, with the events it
    saw; subclasses set ``conv``, ``track`` and ``seen``."""

    conv: Conversation
    track: PacedAudioTrack
    seen: list[Event]
    _sender: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self.conv.start()
        self._sender = asyncio.create_task(self._send())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._sender is not None
        await cancel_and_wait([self._sender])
        await self.conv.close()

    async def _send(self) -> None:
        while True:
            await self.track.recv()

    def kinds(self) -> list[type[Event]]:
        return [type(e) for e in self.seen]

    async def until(self, kind: type[Event], count: int = 1, within: float = 5.0) -> None:
        deadline = time.monotonic() + within
        while self.kinds().count(kind) < count:
            assert time.monotonic() < deadline, f"no {kind.__name__}; saw {self.seen}"
            await asyncio.sleep(0.01)


class Call(Running):
    """One conversation on the real track, with the stub behind its LLM and TTS."""

    def __init__(self, stub: OpenAIStub, merge_window: float = 1.0, **options: Any) -> None:
        self.stub = stub
        self.llm = OpenAILLM("stub-llm", base_url=stub.base_url, api_key=stub.api_key)
        self.tts = OpenAITTS("stub-tts", "alloy", base_url=stub.base_url, api_key=stub.api_key)
        self.track = PacedAudioTrack()
        self.context = LLMContext([{"role": "system", "content": "Be brief."}])
        params = ConversationParams(turn_params=PARAMS, merge_window=merge_window, **options)
        self.conv = Conversation(self.context, self.llm, self.tts, self.track, params)
        # A reply takes 0.3 s to its first audio, measured or not.
        fixed_lead = lambda default, recent=20: 0.3  # noqa: E731
        self.conv.metrics.reply_latency = fixed_lead  # type: ignore[method-assign]  # test stub
        self.track.listener = self.conv
        self.seen: list[Event] = []
        for kind in (UserTurnEndPredicted, UserTurnStopped, LLMResponseStarted,
                     BotStartedSpeaking, BotStoppedSpeaking, Interruption,
                     PreemptiveReplyEnded, UserTurnMerged, UserTranscript, BotPaused,
                     BotResumed, UserTurnDiscarded, Transcription):  # fmt: skip
            self.conv.events.on(kind, self.seen.append)

    async def __aexit__(self, *exc: object) -> None:
        await super().__aexit__(*exc)
        for service in (self.llm, self.tts):
            await service.aclose()

    def say(self, text: str, seconds: float = 0.6, probability: float = 0.95) -> float:
        """A stretch of speech that ended just now, as the session reports it: the VAD's
        start and stop, the words, the model's score. Returns when the speech ended."""
        now = time.monotonic()
        start, end = now - seconds - 0.2, now - 0.2
        for event in (SpeechOnset(start), SpeechStarted(start), SpeechStopped(end)):
            self.conv.feed(event)
        self.conv.feed(Transcription(text, now + 0.02))
        self.conv.feed(TurnEndScore(now + 0.04, probability, end))
        return end

    def chats(self) -> list[Any]:
        return self.stub.requests(CHAT)
