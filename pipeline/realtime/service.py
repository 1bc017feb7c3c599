"""A speech-to-speech model behind the OpenAI Realtime API, as the pipeline's LLM.

:class:`RealtimeModels` is what every session shares (the endpoint, its circuit breaker);
:class:`RealtimeLLM` is one call's connection. Parley keeps the turn-taking: its VAD, echo
handling, end-of-turn rule and backchannel judgement decide when the user spoke
(:meth:`RealtimeLLM.commit` per utterance, :meth:`RealtimeLLM.discard` for speech that
made no turn) and when to answer (each :meth:`RealtimeLLM.stream` is one
``response.create``); the provider's VAD is off. Before each response the context is
mirrored into the provider's conversation (:mod:`.mirror`), so summaries, a turn taken
back and the heard-only assistant text hold here as with the cascade. A barge-in cancels
the response and truncates its audio item at what the user heard (:meth:`RealtimeLLM.heard`).

A connection that fails or closes fails the response in progress (the turn reports an
error, the call goes on); the next response reconnects, behind the shared breaker, and
rebuilds the provider's conversation from the context as text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from loguru import logger

from pipeline.realtime import wire
from pipeline.realtime.connection import RealtimeConnection
from pipeline.realtime.mirror import Mirror
from pipeline.realtime.response import RealtimeError, RealtimeResponse
from pipeline.realtime.server_turns import ServerResponses
from pipeline.realtime.utterances import Utterances
from pipeline.services.circuit import CircuitBreaker

COMMIT_EVENT = "parley_commit"  # the client event id of every commit (errors name it)
COMMIT_WAIT = 1.0  # seconds a response waits for the provider to confirm committed audio
SERVER_GRACE = 1.5  # provider's turns: seconds Parley's answer waits for the provider's


@dataclass(frozen=True)
class RealtimeConfig:
    """Where the model is and how it is asked."""

    base_url: str = "wss://api.openai.com/v1"
    model: str = "gpt-realtime"
    voice: str = "marin"
    api_key: str | None = None
    dialect: wire.Dialect = "ga"
    timeout: float = 10.0  # to the first event of a response, and between events
    connect_timeout: float = 5.0
    turns: str = "parley"  # or the provider's "server_vad" / "semantic_vad"

    @property
    def url(self) -> str:
        return f"{self.base_url.rstrip('/')}/realtime?model={quote(self.model)}"

    def headers(self) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        if self.dialect == "beta":
            headers["OpenAI-Beta"] = "realtime=v1"
        return headers


class RealtimeModels:
    """Shared by every session: opens one :class:`RealtimeLLM` per call."""

    speaks = True
    supports_tools = True

    def __init__(self, config: RealtimeConfig, breaker: CircuitBreaker | None = None) -> None:
        self.config = config
        self.model = config.model
        self.breaker = breaker or CircuitBreaker("llm")

    def open_session(self) -> RealtimeLLM:
        return RealtimeLLM(self.config, self.breaker)

    def stream(self, messages: list[dict[str, Any]], tools: Any = None,
               tool_choice: Any = None) -> RealtimeResponse:  # fmt: skip
        raise RuntimeError("a realtime model speaks to one call: use open_session()")


class RealtimeLLM:
    """One call's realtime connection, used as its conversation's LLM."""

    input_rate = wire.API_RATE
    speaks = True
    supports_tools = True
    thoughts_in_context = False

    def __init__(self, config: RealtimeConfig, breaker: CircuitBreaker) -> None:
        self.config = config
        self.model = config.model
        self.breaker = breaker
        self.mirror = Mirror(config.dialect)
        self._connection: RealtimeConnection | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._session: tuple[str, str] | None = None  # instructions and tools last sent
        self._utterances = Utterances()
        self._committed = asyncio.Event()
        self._awaiting: deque[RealtimeResponse] = deque()  # created, id not yet known
        self._responses: dict[str, RealtimeResponse] = {}
        self.closed = False
        # The provider's VAD takes turns: it commits and starts responses; the caller's
        # audio streams to it whole (continuous), and Parley's answers claim its responses.
        self.continuous = config.turns != "parley"
        self._server = ServerResponses()
        self._server_speaking = False
        # An utterance is being sent and not yet committed (Parley's turns): a reply made
        # at the pause, before the VAD's stop, waits for its item rather than sending the
        # words as text (the audio would then come after the answer, a second user item).
        self._no_utterance_open = asyncio.Event()
        self._no_utterance_open.set()

    # -- the connection ------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.closed

    def start(self) -> None:
        """Connect now, in the background (the first answer need not wait for it)."""
        if not self.connected and (self._connecting is None or self._connecting.done()):
            self._connecting = asyncio.get_running_loop().create_task(self._connect())
            self._connecting.add_done_callback(_quiet)

    async def _ready(self) -> RealtimeConnection:
        if not self.connected:
            if self._connecting is None or self._connecting.done():
                self.start()
            assert self._connecting is not None
            await asyncio.shield(self._connecting)
        assert self._connection is not None
        return self._connection

    async def _connect(self) -> None:
        self.breaker.check()
        try:
            self._connection = await RealtimeConnection.open(
                self.config.url, self.config.headers(), self._on_event, self._on_closed,
                self.config.connect_timeout,
            )  # fmt: skip
        except asyncio.CancelledError:
            self.breaker.abandoned()
            raise
        except Exception as exc:
            self.breaker.failed()
            raise RealtimeError(f"cannot reach the realtime endpoint: {exc}") from exc
        self.breaker.succeeded()
        # A new provider conversation: everything is sent again from the context.
        self.mirror.reset()
        self._utterances.clear()
        self._server.clear()
        # The voice, the audio format and who takes turns hold from the first word (a
        # provider's default session answers speech by its own VAD); the instructions
        # and tools follow with the first answer.
        self._session = ("", "[]")
        self._send(wire.session_update(self.config.dialect, "", [], self.config.voice,
                                       self.config.model, self.config.turns))  # fmt: skip

    def _on_closed(self, reason: str) -> None:
        if not self.closed:
            logger.warning("realtime: {}", reason)
        for response in [*self._awaiting, *self._responses.values()]:
            if not response.done:
                response.fail(reason)
        self._awaiting.clear()
        self._responses.clear()

    async def close(self) -> None:
        self.closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._connection is not None:
            await self._connection.close()

    def _send(self, event: dict[str, Any]) -> None:
        if self._connection is not None:
            self._connection.send(event)

    # -- the caller's audio ----------------------------------------------------------------

    def append_audio(self, pcm: bytes) -> None:
        """24 kHz PCM of an utterance being spoken."""
        if self.connected:
            if not self.continuous:
                self._no_utterance_open.clear()
            self._send(wire.append_audio(pcm))
        elif not self.closed:
            self.start()  # lost while the call went on: back for the next utterance

    def commit(self, onset: float) -> None:
        """The utterance that began at ``onset`` has ended: one user audio item."""
        self._no_utterance_open.set()
        if self.connected:
            self._utterances.sent(onset)
            self._committed.clear()
            self._send(wire.commit_audio(COMMIT_EVENT))

    def clear(self) -> None:
        if self.connected:
            self._send(wire.clear_audio())

    def discard(self, onset: float | None) -> None:
        """Speech that made no turn (a backchannel, a cough): its item goes (now, or when
        the provider confirms its commit)."""
        if self.continuous:
            return  # the provider's VAD made the items: its turns are its own
        item_id = self._utterances.discard(onset)
        if item_id is not None and item_id in self.mirror.pending_user:
            self.mirror.pending_user.remove(item_id)
            self._send(wire.delete_item(item_id))

    # -- responses -------------------------------------------------------------------------

    def stream(
        self, messages: list[dict[str, Any]], tools: Any = None, tool_choice: Any = None
    ) -> RealtimeResponse:
        async def begin(response: RealtimeResponse) -> None:
            await self._sync(messages, tools or [])
            create = wire.create_response(self.config.dialect, tool_choice)
            if self.continuous:
                self._claim(response, create)
            else:
                self._begin(response, create)

        return self._response(begin)

    def fixed(self, text: str) -> _FixedSpeech:
        return _FixedSpeech(self, text)

    def _response(self, begin: Any, own: bool = True) -> RealtimeResponse:
        return RealtimeResponse(begin, self._cancel, self.config.timeout, own)

    def _begin(self, response: RealtimeResponse, create: dict[str, Any]) -> None:
        self._awaiting.append(response)
        self._send({**create, "event_id": f"parley_response_{id(response)}"})

    def _claim(self, response: RealtimeResponse, create: dict[str, Any]) -> None:
        """Provider's turns: this answer is the provider's response to the turn, whether
        it has started (its events so far replayed) or is yet to (after a grace, Parley
        asks for one itself); stale unclaimed ones are cancelled and deleted."""
        self._drop_unclaimed()
        claimed = self._server.claim()
        if claimed is None:
            self._awaiting.append(response)
            nudge = {**create, "event_id": f"parley_response_{id(response)}"}
            asyncio.get_running_loop().call_later(SERVER_GRACE, self._nudge, response, nudge)
            return
        response_id, events = claimed
        self._responses[response_id] = response
        for event in events:
            self._to_response(event)

    def _drop_unclaimed(self) -> None:
        """Cancel and delete the provider's responses no turn claimed in time (or pushed
        out by the bounds of :class:`ServerResponses`)."""
        for _, events in self._server.stale():
            if not any(e.kind == "response.done" for e in events):
                self._send(wire.cancel_response())
            for event in events:
                if event.kind == "response.output_item.added":
                    self._send(wire.delete_item(str((event.get("item") or {}).get("id"))))

    def _nudge(self, response: RealtimeResponse, create: dict[str, Any]) -> None:
        if response in self._awaiting and not response.done:
            self._send(create)  # the provider's VAD started nothing: answer anyway

    async def _until_committed(self) -> None:
        """Wait (up to ``COMMIT_WAIT``) for the utterance being sent to be committed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._no_utterance_open.wait(), COMMIT_WAIT)

    async def _sync(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        await self._ready()
        if not self._no_utterance_open.is_set():  # a reply made at the pause: the stop is near
            await self._until_committed()
        if self._utterances.in_flight or self._server_speaking:  # its item must exist
            try:
                await asyncio.wait_for(self._committed.wait(), COMMIT_WAIT)
            except TimeoutError:
                logger.warning("realtime: committed audio not confirmed in {} s", COMMIT_WAIT)
        plan = self.mirror.plan(messages)
        self._utterances.keep(self.mirror.pending_user)
        session = (plan.instructions, json.dumps(tools, sort_keys=True))
        if session != self._session:
            self._session = session
            # The voice went with the first update, on connecting.
            self._send(wire.session_update(self.config.dialect, plan.instructions, tools,
                                           None, self.config.model, self.config.turns))  # fmt: skip
        for event in plan.events:
            self._send(event)

    def _cancel(self) -> None:
        """A response's stream was closed before it was done: stop the provider."""
        self._send(wire.cancel_response())

    def heard(self, stream: object, seconds: float) -> None:
        """Cut ``stream``'s answer where the user stopped hearing it: the audio item
        that was playing is truncated there, the items after it deleted."""
        if not isinstance(stream, RealtimeResponse) or not stream.own:
            return
        left = max(0.0, seconds) * 1000.0
        kept = []
        for item in stream.items:
            audio = stream.audio_ms.get(item.item_id)
            if audio is None:  # a function call: the context decides (bound or deleted)
                kept.append(item)
            elif left <= 0:
                self._send(wire.delete_item(item.item_id))
            else:
                # Cut inside what came, or at its end while more was still to come (an
                # output that ran dry plays each chunk as it arrives).
                if left < audio or not stream.completed:
                    self._send(wire.truncate_item(item.item_id, int(min(left, audio))))
                kept.append(item)
                left -= audio
        self.mirror.pending_reply = kept

    # -- server events -------------------------------------------------------------------

    def _on_event(self, event: wire.ServerEvent) -> None:
        kind = event.kind
        if kind == "input_audio_buffer.committed":
            item_id = str(event.get("item_id"))
            if self._utterances.committed(item_id):
                self.mirror.pending_user.append(item_id)
            else:
                self._send(wire.delete_item(item_id))
            self._server_speaking = False
            if not self._utterances.in_flight:
                self._committed.set()
        elif kind == "input_audio_buffer.speech_started" and self.continuous:
            self._server_speaking = True
            self._committed.clear()
        elif kind == "response.created":
            self._created(event)
        elif kind.startswith("response."):
            self._to_response(event)
        elif kind == "error":
            self._error(event)

    def _created(self, event: wire.ServerEvent) -> None:
        response_id = str((event.get("response") or {}).get("id"))
        if self._awaiting:
            response = self._awaiting.popleft()
            self._responses[response_id] = response
            if response.done:  # closed before the provider started it
                self._send(wire.cancel_response())
        elif self.continuous:  # the provider's VAD ended a turn: kept for Parley's answer
            self._server.started(response_id)
            self._drop_unclaimed()

    def _to_response(self, event: wire.ServerEvent) -> None:
        response_id = event.get("response_id") or (event.get("response") or {}).get("id")
        response = self._responses.get(str(response_id))
        if response is None:
            self._server.feed(str(response_id), event)
            if self._server.pushed_out:
                self._drop_unclaimed()
            return
        if not response.done:
            response.feed(event)
        elif event.kind == "response.output_item.added":  # after a cut: never heard
            item_id = (event.get("item") or {}).get("id")
            if item_id and response.own:
                self._send(wire.delete_item(str(item_id)))
        if event.kind == "response.done":
            del self._responses[str(response_id)]
            if response.own and event.get("response", {}).get("status") != "cancelled":
                self.mirror.pending_reply = list(response.items)

    def _error(self, event: wire.ServerEvent) -> None:
        """A failure of the provider's fails the response in progress, a refused
        ``response.create`` its own response (errors name the client event that caused
        them); other refused requests (an item already gone, a cancel with nothing to
        cancel) are only logged."""
        error = event.get("error") or {}
        cause = str(error.get("event_id") or "")
        if cause == COMMIT_EVENT:  # e.g. too little audio: no item will come of it
            self._utterances.refused()
            if not self._utterances.in_flight:
                self._committed.set()
        live = [r for r in [*self._awaiting, *self._responses.values()] if not r.done]
        refused = [r for r in self._awaiting if cause == f"parley_response_{id(r)}"]
        if refused:  # it will never be created: out of the queue of those to be
            self._awaiting.remove(refused[0])
            refused[0].feed(event)
        elif live and error.get("type") != "invalid_request_error":
            live[0].feed(event)
        else:
            logger.info("realtime: the endpoint says: {}", error.get("message") or error)


class _FixedSpeech:
    """Speaks a given text in the model's voice, out of band (the context keeps it)."""

    supports_tools = False
    speaks = True

    def __init__(self, llm: RealtimeLLM, text: str) -> None:
        self._llm = llm
        self.text = text
        self.model = llm.model

    def stream(self, messages: Any = None, tools: Any = None,
               tool_choice: Any = None) -> RealtimeResponse:  # fmt: skip
        instructions = f"Say exactly this, word for word, and nothing else: {self.text}"

        async def begin(response: RealtimeResponse) -> None:
            await self._llm._ready()
            create = wire.create_response(self._llm.config.dialect, None, instructions, own=False)
            self._llm._begin(response, create)

        return self._llm._response(begin, own=False)

    def heard(self, stream: object, seconds: float) -> None:
        """Out of band: nothing of it is in the provider's conversation to cut."""


def _quiet(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("realtime: {}", task.exception())
