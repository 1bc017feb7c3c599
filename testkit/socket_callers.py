"""Callers over a WebSocket, for tests and benches: a plain PCM client of ``/ws`` and a
fake Twilio speaking Media Streams to ``/telephony/ws``, both over a real socket.

Each streams a microphone as the real ones do: 20 ms of audio every 20 ms on the wall
clock, silence when nothing is being said (what :meth:`SocketCaller.say` queues is said
next). What the server sends is kept with its arrival times: the bot's audio (16 kHz
mono s16), JSON events, and the close code and reason.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from server.telephony.g711 import G711Decoder, G711Encoder

FRAME = 640  # 20 ms of 16 kHz mono s16


class SocketCaller:
    """A call over one WebSocket (use ``async with``); subclasses speak a dialect."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.headers = headers or {}
        self.ws: ClientConnection | None = None
        self.audio = bytearray()  # the bot, 16 kHz mono s16, as it arrived
        self.audio_times: list[tuple[float, int]] = []  # (arrival, bytes) per message
        self.frames: list[tuple[float, float]] = []  # (arrival, RMS) per message
        self.next_tick = 0.0  # when the microphone sends its next 20 ms
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.close_code: int | None = None
        self.close_reason = ""
        self.closed = asyncio.Event()
        self._speech = bytearray()
        self._tasks: list[asyncio.Task[None]] = []
        self.muted = False  # send nothing at all (a stalled client)

    async def __aenter__(self) -> SocketCaller:
        self.ws = await connect(self.url, additional_headers=self.headers, max_size=2**20)
        await self.opened()
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._mic())]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.ws is not None:
            await self.ws.close()

    # -- the dialect --------------------------------------------------------------------

    async def opened(self) -> None:
        """What the client says first."""

    async def send_audio(self, frame: bytes) -> None:
        raise NotImplementedError

    def heard(self, message: str | bytes) -> None:
        raise NotImplementedError

    # -- the caller ---------------------------------------------------------------------

    def say(self, pcm: bytes | np.ndarray) -> float:
        """Queue 16 kHz mono s16 to be said next; when its first sample goes out (the
        microphone's clock, give or take the event loop)."""
        data = pcm.astype(np.int16).tobytes() if isinstance(pcm, np.ndarray) else pcm
        start = max(self.next_tick, time.monotonic()) + len(self._speech) / 32000
        self._speech += data
        return start

    @property
    def speaking(self) -> bool:
        return bool(self._speech)

    def bot_audio_after(self, t: float) -> float | None:
        """When the bot's first audio after ``t`` arrived (None: none did)."""
        return next((at for at, _ in self.audio_times if at >= t), None)

    def bot_seconds(self) -> float:
        return len(self.audio) / 32000

    async def wait_for(self, check: Callable[[], object], within: float) -> None:
        deadline = time.monotonic() + within
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"not seen within {within} s")
            await asyncio.sleep(0.02)

    def event_types(self) -> list[str]:
        return [str(msg.get("type") or msg.get("event")) for _, msg in self.events]

    async def _mic(self) -> None:
        start = time.monotonic()
        sent = 0
        while True:
            if not self.muted:
                frame = bytes(self._speech[:FRAME])
                del self._speech[:FRAME]
                await self.send_audio(frame.ljust(FRAME, b"\0"))
            sent += 1
            self.next_tick = start + sent * 0.02
            await asyncio.sleep(max(0.0, self.next_tick - time.monotonic()))

    async def _read(self) -> None:
        assert self.ws is not None
        try:
            async for message in self.ws:
                self.heard(message)
        except ConnectionClosed:
            pass
        finally:
            if self.ws.close_code is not None:
                self.close_code = self.ws.close_code
                self.close_reason = self.ws.close_reason or ""
            self.closed.set()

    def _audio_in(self, pcm: bytes) -> None:
        now = time.monotonic()
        self.audio += pcm
        self.audio_times.append((now, len(pcm)))
        samples = np.frombuffer(pcm, np.int16).astype(np.float32)
        self.frames.append((now, float(np.sqrt(np.mean(samples**2))) if len(samples) else 0.0))


class PcmCaller(SocketCaller):
    """A client of ``/ws``: binary PCM both ways, RTVI JSON as text."""

    async def send_audio(self, frame: bytes) -> None:
        assert self.ws is not None
        await self.ws.send(frame)

    async def send_json(self, msg: dict[str, Any]) -> None:
        assert self.ws is not None
        await self.ws.send(json.dumps(msg))

    async def ready(self) -> None:
        """RTVI ``client-ready``, as Pipecat's clients send it."""
        await self.send_json(
            {
                "label": "rtvi-ai",
                "type": "client-ready",
                "id": "ready-1",
                "data": {"version": "1.0.0", "about": {"library": "testkit"}},
            }
        )

    def heard(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            self._audio_in(message)
        else:
            self.events.append((time.monotonic(), json.loads(message)))


class TwilioCaller(SocketCaller):
    """A fake Twilio: Media Streams' messages, μ-law at 8 kHz, marks played back after
    ``playout_delay`` (Twilio's buffer and the line: what was sent is heard that late)."""

    def __init__(
        self,
        url: str,
        parameters: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        call_sid: str | None = None,
        playout_delay: float = 0.0,
    ) -> None:
        super().__init__(url, headers)
        self.playout_delay = playout_delay  # marks are played back this much later
        self._pending_marks: list[tuple[asyncio.TimerHandle, dict[str, Any]]] = []
        self.parameters = parameters or {}
        self.stream_sid = "MZ" + uuid.uuid4().hex
        self.call_sid = call_sid or "CA" + uuid.uuid4().hex
        self._encoder = G711Encoder("mulaw")
        self._decoder = G711Decoder("mulaw")
        self._chunk = 0

    async def opened(self) -> None:
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self._send(
            {
                "event": "start",
                "sequenceNumber": "1",
                "streamSid": self.stream_sid,
                "start": {
                    "streamSid": self.stream_sid,
                    "callSid": self.call_sid,
                    "accountSid": "AC" + "0" * 32,
                    "tracks": ["inbound"],
                    "customParameters": self.parameters,
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                },
            }
        )

    async def send_audio(self, frame: bytes) -> None:
        self._chunk += 1
        payload = base64.b64encode(self._encoder.encode(frame, 16000)).decode()
        await self._send(
            {
                "event": "media",
                "streamSid": self.stream_sid,
                "media": {
                    "track": "inbound",
                    "chunk": str(self._chunk),
                    "timestamp": str(self._chunk * 20),
                    "payload": payload,
                },
            }
        )

    async def press(self, digit: str) -> None:
        await self._send(
            {
                "event": "dtmf",
                "streamSid": self.stream_sid,
                "dtmf": {"track": "inbound_track", "digit": digit},
            }
        )

    async def hang_up(self) -> None:
        """The caller hangs up: Twilio's ``stop``, then the socket closes."""
        await self._send(
            {"event": "stop", "streamSid": self.stream_sid, "stop": {"callSid": self.call_sid}}
        )
        assert self.ws is not None
        await self.ws.close()

    async def _send(self, msg: dict[str, Any]) -> None:
        assert self.ws is not None
        await self.ws.send(json.dumps(msg))

    def heard(self, message: str | bytes) -> None:
        msg = json.loads(message)
        now = time.monotonic()
        self.events.append((now, msg))
        if msg.get("event") == "media":
            self._audio_in(self._decoder.decode(base64.b64decode(msg["media"]["payload"])))
        elif msg.get("event") == "mark":  # played back as Twilio does once it is heard
            loop = asyncio.get_running_loop()
            handle = loop.call_later(self.playout_delay, self._play_back, msg)
            self._pending_marks.append((handle, msg))
        elif msg.get("event") == "clear":  # Twilio sends the pending marks back at once
            pending, self._pending_marks = self._pending_marks, []
            for handle, mark in pending:
                handle.cancel()
                self._play_back(mark)

    def _play_back(self, mark: dict[str, Any]) -> None:
        self._pending_marks = [(h, m) for h, m in self._pending_marks if m is not mark]
        asyncio.get_running_loop().create_task(self._send(mark))


class TelnyxCaller(SocketCaller):
    """A fake Telnyx media stream: the caller in A-law (PCMA), replies expected in Telnyx's
    default reply codec (PCMU), marks played back at once."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(url, headers)
        self.stream_id = str(uuid.uuid4())
        self.call_control_id = "v3:" + uuid.uuid4().hex
        self._encoder = G711Encoder("alaw")
        self._decoder = G711Decoder("mulaw")
        self._sequence = 0

    async def opened(self) -> None:
        await self._send({"event": "connected", "version": "1.0.0"})
        await self._send({
            "event": "start", "stream_id": self.stream_id,
            "start": {"call_control_id": self.call_control_id, "user_id": str(uuid.uuid4()),
                      "from": "+13125550100", "to": "+13125550199",
                      "media_format": {"encoding": "PCMA", "sample_rate": 8000, "channels": 1}},
        })  # fmt: skip

    async def send_audio(self, frame: bytes) -> None:
        payload = base64.b64encode(self._encoder.encode(frame, 16000)).decode()
        media = {"track": "inbound", "chunk": str(self._sequence), "payload": payload}
        await self._send({"event": "media", "stream_id": self.stream_id, "media": media})

    async def press(self, digit: str) -> None:
        await self._send({"event": "dtmf", "stream_id": self.stream_id, "dtmf": {"digit": digit}})

    async def _send(self, msg: dict[str, Any]) -> None:
        self._sequence += 1
        assert self.ws is not None
        await self.ws.send(json.dumps({"sequence_number": str(self._sequence), **msg}))

    def heard(self, message: str | bytes) -> None:
        msg = json.loads(message)
        self.events.append((time.monotonic(), msg))
        if msg.get("event") == "media":
            self._audio_in(self._decoder.decode(base64.b64decode(msg["media"]["payload"])))
        elif msg.get("event") == "mark":
            asyncio.get_running_loop().create_task(self._send(msg))
