"""How a session answers the transceivers of an offer: audio sendrecv with its paced track
(each receiver read once, through the session's packet budget), video recvonly for an LLM
that sees (decoded only when it looks: :mod:`server.media.video_intake`), anything else
inactive so that the browser sends none."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiortc import RTCRtpReceiver

from server.media.inbound_audio import InboundAudio, PacketGate
from server.media.outbound_track import PacedAudioTrack
from server.media.video_intake import VideoIntake


class MediaAttachment:
    """Attaches a session's audio in and out, and its video intake, to the transceivers."""

    def __init__(
        self,
        outbound: PacedAudioTrack,
        gate: PacketGate,
        jitter_frames: int,
        video: VideoIntake | None,
        on_audio: Callable[[bytes], None],
        on_error: Callable[[Exception], None],
    ) -> None:
        self.outbound = outbound
        self.gate = gate
        self.jitter_frames = jitter_frames
        self.video = video
        self._on_audio = on_audio
        self._on_error = on_error
        self._inbound: dict[RTCRtpReceiver, InboundAudio] = {}

    def attach(self, pc: Any) -> None:
        """Answer every transceiver of ``pc`` (after its remote description is set; each
        renegotiation again: an audio receiver already read is left as it is)."""
        for transceiver in pc.getTransceivers():
            receiver = transceiver.receiver
            if transceiver.kind == "audio":
                self._attach_audio(transceiver)
            elif transceiver.kind == "video" and self.video and self.video.attach(receiver):
                transceiver.direction = "recvonly"
            elif transceiver.direction != "inactive":
                transceiver.direction = "inactive"

    def _attach_audio(self, transceiver: Any) -> None:
        receiver = transceiver.receiver
        if receiver not in self._inbound:
            # jitter_frames counts the packet itself: 1 = a gap waits for none after it.
            hold = self.jitter_frames - 1
            inbound = InboundAudio(self._on_audio, self._on_error, gate=self.gate, hold=hold)
            self._inbound[receiver] = inbound
            inbound.attach(receiver)
        if transceiver.sender.track is None:
            transceiver.sender.replaceTrack(self.outbound)
        transceiver.direction = "sendrecv"
        # Tell the client our decoder uses in-band FEC (RFC 7587), which it then sends
        # once it sees loss: a lost packet is rebuilt from the next one's coarse copy
        # rather than extrapolated (server/media/inbound_audio.py). aiortc answers with
        # no fmtp of its own; its codecs for this answer are copies, made per transceiver.
        for codec in getattr(transceiver, "_codecs", ()):
            if codec.mimeType.lower() == "audio/opus":
                codec.parameters["useinbandfec"] = 1

    def audio_loss(self) -> dict[str, int]:
        """Inbound audio packets lost on the way, arrived too late to use, and concealed
        (all the session's audio receivers together)."""
        inbound = self._inbound.values()
        return {
            "audio_packets_lost": sum(i.jitter.lost for i in inbound),
            "audio_packets_late": sum(i.jitter.late for i in inbound),
            "audio_packets_concealed": sum(i.concealed for i in inbound),
        }
