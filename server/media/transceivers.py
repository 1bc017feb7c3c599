"""How a session answers the transceivers of an offer: audio sendrecv with its paced track
(each receiver read once, through the session's packet budget), video recvonly for an LLM
that sees (decoded only when it looks: :mod:`server.media.video_intake`), anything else
inactive so that the browser sends none."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from aiortc import RTCRtpReceiver

from server.media.inbound_audio import InboundAudio, PacketGate
from server.media.outbound_track import PacedAudioTrack
from server.media.video_intake import VideoIntake

# What our answer tells the client of the Opus it sends (RFC 7587 format parameters):
# - our decoder uses in-band FEC, which the client then sends once it sees loss: a lost
#   packet is rebuilt from the next one's coarse copy rather than extrapolated
#   (server/media/inbound_audio.py);
# - we play at 16 kHz (everything heard is decoded to 16 kHz), so a browser codes up to
#   8 kHz (SILK alone: real Chromium does) at 32 kbit/s (libwebrtc takes
#   maxaveragebitrate as its bitrate; unsaid, it would be 20 kbit/s). bench/opus_voice.py,
#   on eight voices: PESQ wide-band 4.23 median, 3.94 worst, against 3.74 and 3.48 for
#   the hybrid up to 20 kHz a browser sends otherwise, and 14 µs to decode a frame
#   against 24.
RECEIVE_OPUS = {"useinbandfec": 1, "maxplaybackrate": 16000, "maxaveragebitrate": 32000}


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
        remote = pc.remoteDescription.sdp if pc.remoteDescription else ""
        if (cap := opus_parameter(remote, "maxaveragebitrate")) is not None:
            self.outbound.limit_bitrate(cap)
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
        # aiortc answers with no fmtp of its own; its codecs for this answer are copies,
        # made per transceiver. What the answer tells the client (RFC 7587):
        for codec in getattr(transceiver, "_codecs", ()):
            if codec.mimeType.lower() == "audio/opus":
                codec.parameters.update(RECEIVE_OPUS)

    def audio_loss(self) -> dict[str, int]:
        """Inbound audio packets lost on the way, arrived too late to use, and concealed
        (all the session's audio receivers together)."""
        inbound = self._inbound.values()
        return {
            "audio_packets_lost": sum(i.jitter.lost for i in inbound),
            "audio_packets_late": sum(i.jitter.late for i in inbound),
            "audio_packets_concealed": sum(i.concealed for i in inbound),
        }


_OPUS = re.compile(r"^a=rtpmap:(\d+) opus/", re.IGNORECASE | re.MULTILINE)


def opus_parameter(sdp: str, name: str) -> int | None:
    """The lowest value of the integer format parameter ``name`` on the Opus formats of
    ``sdp`` (RFC 7587's ``maxaveragebitrate``, ``maxplaybackrate``...), or None when no
    Opus format sets it."""
    values = []
    for payload_type in set(_OPUS.findall(sdp)):
        fmtp = re.search(rf"^a=fmtp:{payload_type} (.*)$", sdp, re.MULTILINE)
        found = fmtp and re.search(rf"(?:^|;)\s*{re.escape(name)}=(\d{{1,7}})\b", fmtp[1])
        if found:
            values.append(int(found[1]))
    return min(values) if values else None
