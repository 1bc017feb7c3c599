"""A live TTS over one WebSocket per call: what every WebSocket voice shares.

A vendor is a :class:`TTSDialect` (its URL, its messages, how to read its answers) and a
:class:`SocketTTS` subclass that makes one. :class:`SocketTTSConnection` does the rest:

- it connects when the call opens it, so the first answer does not wait for a
  handshake, and keeps the socket for the whole call (reconnected, at the next sentence
  at the latest, when it drops);
- a sentence (:meth:`SocketTTSContext.say`) is sent with the answer's context id and a
  flush, and its audio is read until the vendor says the flush is done: each sentence's
  audio is known exactly, so the outbound track tags it with its text as it does for a
  per-sentence TTS, while the vendor hears the sentences as one continued answer;
- a sentence whose socket fails (or cannot be opened) before its first audio is sent
  again on a new socket once; after audio has gone out the failure ends the sentence
  (a retry would repeat it). A failure counts once for the breaker; an open breaker fails at once;
- closing a sentence's stream early (a barge-in) tells the vendor to cancel the context;
  audio still arriving for it is dropped. A vendor without contexts
  (``multiplexed = False``) speaks one sentence at a time, and its cancel is confirmed
  (a ``Done`` with ``cleared``) before later audio is taken as the next sentence's.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, aclosing

import numpy as np
from loguru import logger

from pipeline.services.circuit import CircuitBreaker, ServiceUnavailableError
from pipeline.services.errors import (
    ServiceError,
    ServiceUnreachableError,
    timed_out,
    unreachable,
)
from pipeline.services.live_tts import SpokenText
from pipeline.services.openai_tts import PCMDecoder
from pipeline.services.tts_dialect import Audio, Done, Failed, Timestamps, TTSDialect
from pipeline.services.vendor_socket import Message, VendorSocket
from pipeline.task_cancel import cancel_and_wait

SERVICE = "tts"
MAX_SENTENCE_MESSAGES = 4096  # audio messages of one sentence not yet read: minutes of it
RECONNECT_PAUSE = 1.0  # seconds before a socket that dropped while idle is reopened


class SocketTTS(ABC):
    """The service, shared by every call: one :class:`SocketTTSConnection` per call."""

    name = "tts"

    def __init__(
        self,
        *,
        model: str,
        voice: str,
        sample_rate: int = 24000,
        breaker: CircuitBreaker | None = None,
        connect_timeout: float = 5.0,
        audio_timeout: float = 5.0,
        key_hint: str = "",
    ) -> None:
        self.model = model
        self.voice = voice
        self.sample_rate = sample_rate
        self.breaker = breaker
        self.connect_timeout = connect_timeout
        self.audio_timeout = audio_timeout  # for the first audio, and between chunks
        self.key_hint = key_hint

    @abstractmethod
    def dialect(self) -> TTSDialect:
        """A new connection's wire protocol."""

    def open_live(self) -> SocketTTSConnection:
        return SocketTTSConnection(self)

    async def synthesize(self, text: str) -> AsyncGenerator[np.ndarray, None]:
        """One text over a socket of its own (a fallback's or a test's path)."""
        connection = self.open_live()
        try:
            context = connection.context()
            async with aclosing(context.say(SpokenText(text))) as audio:
                async for pcm in audio:
                    yield pcm
            context.close()
        finally:
            await connection.aclose()


class _Sentence:
    """A sentence being spoken: its audio as it arrives, until its flush is done."""

    def __init__(self, text: SpokenText, offset: float) -> None:
        self.text = text
        self.offset = offset  # seconds of the context's audio before this sentence
        self.shift: float | None = None  # what the vendor's word times count from
        self.items: asyncio.Queue[bytes | ServiceError | None] = asyncio.Queue()
        self.done = False

    def timed(self, words: tuple[tuple[str, float, float], ...]) -> None:
        """Words of the context's audio, into the sentence's text. Times before the
        sentence's start mean the vendor counts from each sentence, not the context."""
        if not words:
            return
        if self.shift is None:
            self.shift = self.offset if words[0][1] >= self.offset - 0.05 else 0.0
        for word, start, end in words:
            self.text.add_word(word, max(0.0, start - self.shift), max(0.0, end - self.shift))

    def put(self, item: bytes | ServiceError | None) -> None:
        if self.done:
            return
        if item is None or isinstance(item, ServiceError):
            self.done = True
        elif self.items.qsize() >= MAX_SENTENCE_MESSAGES:
            self.done = True
            item = ServiceError(SERVICE, "the voice sent more audio than a sentence holds")
        self.items.put_nowait(item)


class SocketTTSConnection:
    """One call's socket to the voice (see the module docstring)."""

    def __init__(self, owner: SocketTTS) -> None:
        self.owner = owner
        self.sample_rate = owner.sample_rate
        self.model = owner.model
        self.dialect = owner.dialect()
        self.socket: VendorSocket | None = None
        self.generation = 0  # sockets opened so far: a context is new on each
        self._connecting: asyncio.Task[VendorSocket] | None = None
        self.sentences: dict[str | None, _Sentence] = {}
        self.turn = asyncio.Lock()  # one sentence at a time, for a vendor without contexts
        self.clearing = 0  # cancels not yet confirmed (a vendor without contexts)
        self._last_sent = time.monotonic()
        self._closed = False
        # Why the latest connect failed, until one succeeds: a fallback need not wait
        # for this voice to fail again (the call's first connect runs at its start).
        self.down: ServiceError | None = None
        self._waiting = 0  # sentences waiting for a connect
        self._closing: set[asyncio.Task[None]] = set()  # sockets given up, being closed
        self._keepalive: asyncio.Task[None] | None = None
        if self.dialect.keepalive_seconds:
            self._keepalive = asyncio.get_running_loop().create_task(self._keep_alive())
        self._connect_soon()

    @property
    def connected(self) -> bool:
        return self.socket is not None and not self.socket.closed

    def context(self) -> SocketTTSContext:
        return SocketTTSContext(self)

    def send(self, messages: list[Message]) -> None:
        if self.socket is not None:
            for message in messages:
                self.socket.send(message)
            self._last_sent = time.monotonic()

    async def ready(self) -> VendorSocket:
        """The open socket, connecting (within ``connect_timeout``) if there is none."""
        if self._closed:
            raise unreachable(SERVICE, "the connection is closed")
        if self.socket is not None and not self.socket.closed:
            return self.socket
        self._connect_soon()
        assert self._connecting is not None
        self._waiting += 1  # a sentence waits: its failure counts for the breaker
        try:
            return await asyncio.shield(self._connecting)
        finally:
            self._waiting -= 1

    def probe(self) -> None:
        """Try to connect now, in the background (a fallback is serving meanwhile)."""
        self._connect_soon()

    async def aclose(self) -> None:
        self._closed = True
        self._end_sentences(unreachable(SERVICE, "the connection is closed"))
        await cancel_and_wait({t for t in (self._keepalive, self._connecting) if t})
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        socket, self.socket = self.socket, None
        if socket is not None:
            await socket.finish(self.dialect.closing())

    def _connect_soon(self) -> None:
        if self._closed or self.connected:
            return
        if self._connecting is not None and not self._connecting.done():
            return
        self._connecting = asyncio.get_running_loop().create_task(self._connect())
        # A background connect nobody awaits must not warn "exception never retrieved".
        self._connecting.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _connect(self) -> VendorSocket:
        owner, dialect = self.owner, self.dialect
        try:
            socket = await VendorSocket.open(
                dialect.url, dialect.headers, self._on_message, self._on_closed,
                seconds=owner.connect_timeout, name=owner.name, service=SERVICE,
                key_hint=owner.key_hint,
            )  # fmt: skip
        except ServiceError as exc:
            logger.warning("{}: {} {}", owner.name, exc, exc.detail)
            self.down = exc
            if owner.breaker is not None and not self._waiting:  # nobody else counts it
                owner.breaker.failed(exc)
            raise
        if self._closed:
            await socket.close()
            raise unreachable(SERVICE, "the connection is closed")
        self.socket = socket
        self.down = None
        self.generation += 1
        self.clearing = 0
        self.send(dialect.opening())
        return socket

    def _on_message(self, message: Message) -> None:
        for signal in self.dialect.read(message):
            if isinstance(signal, Done) and signal.cleared:
                self.clearing = max(0, self.clearing - 1)
                continue
            if isinstance(signal, Failed) and signal.context is None:
                logger.warning("{}: {}", self.owner.name, signal.error.detail or signal.error)
                self._end_sentences(signal.error)
                continue
            if self.clearing and not self.dialect.multiplexed:
                continue  # a cancelled sentence's last audio: not the next one's
            key = signal.context if self.dialect.multiplexed else None
            sentence = self.sentences.get(key)
            if sentence is None:
                continue  # a cancelled context's, or a sentence nobody waits for
            if isinstance(signal, Audio):
                if signal.pcm:
                    sentence.put(signal.pcm)
            elif isinstance(signal, Timestamps):
                sentence.timed(signal.words)
            elif isinstance(signal, Done):
                sentence.put(None)
            else:
                sentence.put(signal.error)

    def await_cleared(self) -> None:
        """A cancel was sent (a vendor without contexts): later audio is the cut
        sentence's until the vendor confirms. One it never confirms costs the socket,
        not every later sentence."""
        self.clearing += 1
        generation = self.generation

        def check() -> None:
            if self.clearing and self.generation == generation and self.socket is not None:
                logger.warning("{}: a cancel was not confirmed; reconnecting", self.owner.name)
                self._drop(self.socket)

        asyncio.get_running_loop().call_later(self.owner.audio_timeout, check)

    def _drop(self, socket: VendorSocket) -> None:
        self.socket = None
        task = asyncio.get_running_loop().create_task(socket.close())
        self._closing.add(task)  # awaited by aclose(): no transport left open
        task.add_done_callback(self._closing.discard)

    def _on_closed(self, reason: str) -> None:
        if self._closed:
            return
        logger.info("{}: {}", self.owner.name, reason)
        self.socket = None
        idle = not self.sentences
        self._end_sentences(unreachable(SERVICE, "the connection dropped"))
        if idle:  # reopened now (a pause first): the next answer needs no handshake
            asyncio.get_running_loop().call_later(RECONNECT_PAUSE, self._connect_soon)

    def _end_sentences(self, error: ServiceError) -> None:
        for sentence in self.sentences.values():
            sentence.put(error)

    async def _keep_alive(self) -> None:
        seconds = self.dialect.keepalive_seconds or 5.0
        while True:
            await asyncio.sleep(seconds / 2)
            if self.connected and time.monotonic() - self._last_sent >= seconds / 2:
                message = self.dialect.keepalive()
                if message is not None:
                    self.send([message])


class SocketTTSContext:
    """One answer on the call's socket; its sentences are spoken in turn."""

    def __init__(self, connection: SocketTTSConnection) -> None:
        self._connection = connection
        self.id = uuid.uuid4().hex
        self._generation = -1  # the socket this context was opened on
        self._seconds = 0.0  # of audio spoken in this context on that socket
        self._cancelled = False
        self._asked = False  # the latest sentence reached the socket

    async def say(self, text: SpokenText) -> AsyncGenerator[np.ndarray, None]:
        breaker = self._connection.owner.breaker
        if breaker is not None:
            breaker.check()
        try:
            # aclosing at each level: a barge-in closes this stream, and the cancel must
            # reach the vendor now, not when the inner generators are collected.
            async with aclosing(self._attempts(text)) as audio:
                async for pcm in audio:
                    yield pcm
        except ServiceError as exc:
            if breaker is not None and not isinstance(exc, ServiceUnavailableError):
                breaker.failed(exc)
            raise
        except (asyncio.CancelledError, GeneratorExit):
            if breaker is not None:
                breaker.abandoned()
            raise
        if breaker is not None:
            breaker.succeeded()

    async def _attempts(self, text: SpokenText) -> AsyncGenerator[np.ndarray, None]:
        """The sentence, sent again on a new socket if the first fails before audio."""
        for attempt in range(2):
            spoken = False
            try:
                async with aclosing(self._once(text)) as audio:
                    async for pcm in audio:
                        spoken = True
                        yield pcm
                return
            except ServiceUnreachableError:
                # Once, for a socket that dropped under the sentence; a connect that
                # failed was already given its time.
                if spoken or attempt or not self._asked:
                    raise
                # A new context on the new socket: the vendor may refuse a cancelled id.
                self.id, self._generation, self._cancelled = uuid.uuid4().hex, -1, False

    async def _once(self, text: SpokenText) -> AsyncGenerator[np.ndarray, None]:
        connection = self._connection
        dialect = connection.dialect
        if not text.strip():
            return  # nothing to say: a vendor may never answer an empty flush
        if self._cancelled:  # spoken again after a cut: a fresh context, told apart
            self.id, self._generation, self._cancelled = uuid.uuid4().hex, -1, False
        async with AsyncExitStack() as stack:
            if not dialect.multiplexed:
                await stack.enter_async_context(connection.turn)
            self._asked = False
            await connection.ready()  # bounded by connect_timeout
            first = self._generation != connection.generation
            if first:
                self._generation, self._seconds = connection.generation, 0.0
            key = self.id if dialect.multiplexed else None
            sentence = connection.sentences[key] = _Sentence(text, self._seconds)
            finished = False
            try:
                connection.send(dialect.speak(self.id, text, first))
                self._asked = True
                async with aclosing(self._audio(sentence)) as audio:
                    async for pcm in audio:
                        yield pcm
                finished = True
            finally:
                connection.sentences.pop(key, None)
                if not finished and not self._cancelled:
                    self._cancel()

    async def _audio(self, sentence: _Sentence) -> AsyncGenerator[np.ndarray, None]:
        owner = self._connection.owner
        decoder = PCMDecoder()
        while True:
            try:
                async with asyncio.timeout(owner.audio_timeout):
                    item = await sentence.items.get()
            except TimeoutError:
                raise timed_out(SERVICE, f"no audio within {owner.audio_timeout:g} s") from None
            if item is None:
                return
            if isinstance(item, ServiceError):
                raise item
            pcm = decoder.feed(item)
            if pcm is not None:
                self._seconds += len(pcm) / owner.sample_rate
                yield pcm

    def cancel(self) -> None:
        if not self._cancelled:
            self._cancel()

    def _cancel(self) -> None:
        """Tell the vendor to stop this context (a barge-in, or a failed sentence)."""
        connection = self._connection
        if connection.connected and self._generation == connection.generation:
            self._cancelled = True
            connection.send(connection.dialect.cancel(self.id))
            if not connection.dialect.multiplexed:
                connection.await_cleared()

    def close(self) -> None:
        connection = self._connection
        if self._cancelled or self._generation != connection.generation:
            return
        if connection.connected:
            connection.send(connection.dialect.end(self.id))
