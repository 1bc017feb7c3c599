"""A WebRTC test client that behaves like the Pipecat browser client, built on aiortc.

It offers audio (mid 0) and video (mid 1), opens the ``chat`` data channel, trickles its
ICE candidates with PATCH instead of putting them in the offer, pings every second,
speaks RTVI (1.4 by default, what most tests check; ``rtvi_version="2.1.0"`` for what the
official client announces) and records the audio it receives. ``python -m
testkit.rtc_client URL`` runs one in its own process (used to make a peer vanish with SIGKILL).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import numpy as np
from aiortc import (
    MediaStreamTrack,
    RTCBundlePolicy,
    RTCConfiguration,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.jitterbuffer import JitterBuffer

from pipeline.task_cancel import cancel_and_wait
from server.media.inbound_audio import InboundAudio
from server.rtvi import server_messages
from testkit.openai_stub import OpenAIStub
from testkit.rtc_microphone import TestMicrophone
from testkit.rtp_loss import PacketLoss

_JITTER = "_RTCRtpReceiver__jitter_buffer"  # aiortc 1.16's name
FRAME_SECONDS = 0.02  # one received audio frame


def split_candidates(sdp: str) -> tuple[str, list[str]]:
    """The SDP without its candidate lines, and those candidates (for trickling)."""
    kept, candidates = [], []
    for line in sdp.splitlines():
        if line.startswith("a=candidate:"):
            candidates.append(line[2:])
        elif line != "a=end-of-candidates":
            kept.append(line)
    return "\r\n".join(kept) + "\r\n", candidates


@dataclass
class ReceivedAudio:
    """RMS of each received frame, with the time it arrived."""

    frames: list[tuple[float, float]] = field(default_factory=list)

    def loud_frames(self, threshold: float = 200.0, since: float = 0.0) -> int:
        return sum(1 for t, rms in self.frames if rms > threshold and t >= since)


class RTCTestClient:
    """One simulated browser peer talking to a Parley server at ``base_url``."""

    def __init__(
        self,
        base_url: str,
        wav: str | None = None,
        ping: bool = True,
        jitter_frames: int | None = None,
        configuration: RTCConfiguration | None = None,
        echo: tuple[float, float] | None = None,
        camera: MediaStreamTrack | None = None,
        rtvi_version: str = "1.4.0",
        loss: PacketLoss | None = None,
    ) -> None:
        """``loss``: the microphone's packets lost on the way (:mod:`testkit.rtp_loss`).
        ``echo``: ``(gain dB, delay s)`` at which the bot's audio comes back into the
        microphone, as from a loudspeaker with no echo cancellation. ``camera``: a video
        track to send on mid 1 (``testkit.rtc_camera.ColourCamera``); else mid 1 sends none,
        as a browser with the camera off. ``rtvi_version``: what ``client-ready`` announces."""
        self.rtvi_version = rtvi_version
        self.base_url = base_url.rstrip("/")
        self.http = httpx.AsyncClient(base_url=self.base_url, timeout=20)
        # max-bundle always: the transceiver order below depends on it.
        bundled = replace(
            configuration or RTCConfiguration(), bundlePolicy=RTCBundlePolicy.MAX_BUNDLE
        )
        self.pc = RTCPeerConnection(bundled)
        self.mic = self.microphone()
        if wav:
            self.mic.play(wav)
        # Transceivers first, then the channel: with max-bundle, aiortc makes the first
        # transport it creates the bundle's, and it must be mid 0's (audio).
        audio = self.pc.addTransceiver(self.mic, direction="sendrecv")
        self._audio_sender, self.loss = audio.sender, loss
        # Received audio is decoded on this loop, as the server does (16 kHz mono), but
        # through aiortc's own jitter buffer, as before the server had its own: what the
        # client measures stays comparable across versions of the server. It holds each
        # packet until the next one comes (and ``jitter_frames`` packets, 4 by default:
        # an 80 ms client-side delay that benches set to 1).
        self.receive_audio(audio.receiver, 4 if jitter_frames is None else jitter_frames)
        self.pc.addTransceiver(camera or "video", direction="sendrecv")
        self.channel = self.pc.createDataChannel("chat", ordered=True)
        self.messages: list[dict[str, Any]] = []
        self.arrivals: list[float] = []  # time.monotonic() of each message, as messages
        self.texts: list[str] = []
        self.audio = ReceivedAudio()
        self.pc_id: str | None = None
        self.offer_path = "/api/offer"
        self._ids = itertools.count(1)
        self._arrived = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._ping = ping
        self.echo = echo
        self._speaker_at: float | None = None  # when the loudspeaker plays the next sample
        self.channel_open = asyncio.Event()
        self.channel.on("open", self.channel_open.set)
        self.channel.on("message", self._on_message)

    def microphone(self) -> TestMicrophone:
        """The microphone track (a subclass may send another)."""
        return TestMicrophone()

    def receive_audio(self, receiver: Any, prefetch: int) -> None:
        """Decode what ``receiver`` gets into :meth:`_on_pcm` (or a subclass's way)."""
        InboundAudio(self._on_pcm).attach(receiver)
        setattr(receiver, _JITTER, JitterBuffer(capacity=16, prefetch=prefetch))

    # -- signalling ----------------------------------------------------------------

    async def connect(
        self, session_id: str | None = None, trickle: bool = True, restart_pc: bool = False
    ) -> float:
        """Offer, get the answer, trickle candidates; returns seconds to ``bot-ready``.
        ``restart_pc``: take over ``self.pc_id`` (set beforehand) with this new peer
        connection, as a browser does after losing its connection."""
        if session_id:
            self.offer_path = f"/sessions/{session_id}/api/offer"
        started = time.monotonic()
        await self.pc.setLocalDescription(await self.pc.createOffer())
        sdp, candidates = split_candidates(self.pc.localDescription.sdp)
        offer = sdp if trickle else self.pc.localDescription.sdp
        answer = await self.post_offer(offer, restart_pc=restart_pc)
        await self.pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
        self.mic.follow(answer["sdp"])
        if self.loss is not None:
            self.loss.install(self._audio_sender)
        if trickle:
            items = [{"candidate": c, "sdp_mid": "0", "sdp_mline_index": 0} for c in candidates]
            items.append({"candidate": "", "sdp_mid": "0", "sdp_mline_index": 0})
            response = await self.http.patch(
                self.offer_path, json={"pc_id": self.pc_id, "candidates": items}
            )
            response.raise_for_status()
        await asyncio.wait_for(self.channel_open.wait(), 15)
        if self._ping:
            self._tasks.append(asyncio.create_task(self._ping_loop()))
        ready_id = self.send_rtvi(
            "client-ready",
            {
                "version": self.rtvi_version,
                "about": {"library": "parley-tests", "library_version": "0"},
            },
        )
        await self.wait_for(lambda m: m.get("type") == "bot-ready" and m.get("id") == ready_id)
        return time.monotonic() - started

    async def post_offer(self, sdp: str, restart_pc: bool = False) -> dict[str, Any]:
        body = {"sdp": sdp, "type": "offer", "pc_id": self.pc_id, "restart_pc": restart_pc}
        response = await self.http.post(self.offer_path, json=body)
        response.raise_for_status()
        answer = response.json()
        self.pc_id = answer["pc_id"]
        return answer

    async def renegotiate(self, restart_pc: bool = False) -> dict[str, Any]:
        """A new offer on the same peer connection, posted under the same pc_id."""
        await self.pc.setLocalDescription(await self.pc.createOffer())
        answer = await self.post_offer(self.pc.localDescription.sdp, restart_pc=restart_pc)
        await self.pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
        self.mic.follow(answer["sdp"])
        return answer

    # -- data channel --------------------------------------------------------------

    def send_rtvi(self, type_: str, data: Any = None) -> str:
        msg_id = f"t{next(self._ids)}"
        msg: dict[str, Any] = {"label": "rtvi-ai", "type": type_, "id": msg_id}
        if data is not None:
            msg["data"] = data
        self.channel.send(json.dumps(msg))
        return msg_id

    def send_raw(self, text: str) -> None:
        self.channel.send(text)

    async def request(self, t: str, d: Any = None) -> dict[str, Any]:
        """A ``client-message``, and the server's answer to it (same id)."""
        msg_id = self.send_rtvi("client-message", {"t": t, "d": d})
        return await self.wait_for(lambda m: m.get("id") == msg_id)

    def _on_message(self, text: str | bytes) -> None:
        if isinstance(text, bytes):
            text = text.decode()
        self.texts.append(text)
        try:
            message = json.loads(text)
        except ValueError:
            return
        self.messages.append(message)
        self.arrivals.append(time.monotonic())
        self._arrived.set()

    async def wait_for(self, match: Any, within: float = 10.0) -> dict[str, Any]:
        """The first message (already received or arriving) for which ``match`` is true."""
        deadline = time.monotonic() + within
        seen = 0
        while True:
            for msg in self.messages[seen:]:
                if match(msg):
                    return msg
            seen = len(self.messages)
            self._arrived.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching message; got {self.messages[-5:]}")
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except TimeoutError:
                pass

    async def _ping_loop(self) -> None:
        while True:
            if self.channel.readyState == "open":
                self.channel.send(f"ping: {int(time.time() * 1000)}")
            await asyncio.sleep(1)

    # -- media ---------------------------------------------------------------------

    def _on_pcm(self, frame: bytes) -> None:
        samples = np.frombuffer(frame, dtype=np.int16).astype(np.float32)
        rms = float(np.sqrt(np.dot(samples, samples) / samples.size))
        now = time.monotonic()
        self.audio.frames.append((now, rms))
        if self.echo is not None:
            gain_db, delay = self.echo
            # A loudspeaker plays what arrives back to back, as a device does; only after
            # an underrun does it start again from the arrival.
            if self._speaker_at is None or now > self._speaker_at + 0.1:
                self._speaker_at = now
            # 16 kHz decoded → 48 kHz for the microphone (the codec filters the images).
            self.mic.hear(np.repeat(samples, 3) * 10 ** (gain_db / 20), self._speaker_at + delay)
            self._speaker_at += samples.size / 16000

    def play(self, wav: str) -> float:
        """Start sending ``wav`` as the microphone, now; returns the time it started."""
        self.mic.play(wav)
        return time.monotonic()

    async def played_out(self, within: float = 30.0) -> None:
        """Wait until the microphone has sent all the audio :meth:`play` queued."""
        deadline = time.monotonic() + within
        while self.mic.pending_seconds > 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.mic.pending_seconds:.1f} s of audio still unsent")
            await asyncio.sleep(0.02)

    def silent_since(self, since: float, threshold: float = 200.0, hold: int = 10) -> float | None:
        """When received audio went quiet after ``since`` and stayed so for ``hold`` frames'
        time (20 ms each). Time, not a count of packets: a server that sends silence as
        DTX sends a packet every 400 ms, and a listener hears the silence between."""
        span = (hold - 1) * FRAME_SECONDS
        quiet_from: float | None = None
        for t, rms in self.audio.frames:
            if t < since:
                continue
            if rms > threshold:
                quiet_from = None
            elif quiet_from is None:
                quiet_from = t
            elif t - quiet_from >= span:
                return quiet_from
        if quiet_from is not None and time.monotonic() - quiet_from >= span + FRAME_SECONDS:
            return quiet_from  # nothing came since: quiet (DTX), or the stream stopped
        return None

    def types(self) -> list[str]:
        """The types of the RTVI messages received so far, in order."""
        return [m.get("type", "") for m in self.messages]

    def assert_valid_rtvi(self) -> None:
        """Every RTVI message received so far passes the protocol's models."""
        for msg in self.messages:
            if msg.get("type") != "signalling":
                server_messages.validate(msg)

    def stop_pinging(self) -> None:
        for task in self._tasks:
            task.cancel()

    def vanish(self) -> None:
        """Disappear as a crashed browser or a dead network would: no close, no goodbye.
        The microphone and pings stop, and the UDP sockets under ICE go deaf and mute
        (every datagram in or out is dropped), so nothing more reaches the server; only
        its liveness timeout can notice. Call :meth:`close` afterwards to free this side:
        its goodbyes are dropped too."""
        self.stop_pinging()
        self.mic.stop()
        ice = self.pc.getTransceivers()[0].sender.transport.transport
        for protocol in ice._connection._protocols:  # aiortc exposes no public way
            protocol.transport.sendto = _drop  # type: ignore[method-assign, assignment]  # a vanished client drops every datagram
            protocol.datagram_received = _drop  # type: ignore[method-assign, assignment]  # and hears none

    async def close(self) -> None:
        await cancel_and_wait(self._tasks)
        await self.pc.close()
        await self.http.aclose()

    async def __aenter__(self) -> RTCTestClient:
        """``async with RTCTestClient(url) as client:`` connects (with :meth:`connect`'s
        defaults) and closes on the way out, also when connecting fails."""
        try:
            await self.connect()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _drop(*args: Any) -> None:
    """Stands in for a socket that no longer sends or receives."""


async def _hold(base_url: str) -> None:
    client = RTCTestClient(base_url)
    await client.connect()
    print(client.pc_id, flush=True)
    await asyncio.sleep(3600)


@asynccontextmanager
async def checked_client(url: str, stub: OpenAIStub) -> AsyncIterator[RTCTestClient]:
    """A connected client on a fresh stub; on a clean exit every RTVI message it got must
    have passed the protocol's models."""
    stub.reset()
    connected = RTCTestClient(url)
    try:
        await connected.connect()
        yield connected
        connected.assert_valid_rtvi()
    finally:
        await connected.close()
        stub.reset()


if __name__ == "__main__":
    asyncio.run(_hold(sys.argv[1]))
