"""Inbound audio: Opus frames from a receiver, decoded on the loop to 16 kHz mono."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
from aiortc import RTCPeerConnection

from server.media.audio_jitter import AudioJitter, Released
from server.media.inbound_audio import MAX_CONCEALED, InboundAudio
from server.media.libopus import Encoder
from server.media.opus import OpusEncoder

OPUS = SimpleNamespace(name="opus")


def tone(seconds: float, freq: float, rate: int = 48000, amp: int = 8000) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def opus_frames(samples: np.ndarray) -> list[SimpleNamespace]:
    """What the jitter buffer hands on: one encoded 20 ms frame each (48 kHz input)."""
    encoder = OpusEncoder()
    return [
        SimpleNamespace(data=bytes(encoder.encode(samples[i : i + 960].tobytes(), i)), timestamp=i)
        for i in range(0, samples.size - 959, 960)
    ]


def test_each_opus_packet_is_delivered_at_once_as_16k_mono_with_the_tone_intact() -> None:
    frames: list[bytes] = []
    inbound = InboundAudio(frames.append)
    for count, encoded in enumerate(opus_frames(tone(1.0, 300.0)), start=1):
        inbound.put((OPUS, encoded))
        # Each packet's audio comes out with it (no waiting for the next one), short
        # only by the few samples the resampler holds back.
        assert len(frames) == count
        assert 16000 * 0.02 * count - 64 <= sum(len(f) for f in frames) / 2 <= 320 * count
    pcm = np.frombuffer(b"".join(frames), dtype=np.int16).astype(np.float32)
    middle = pcm[1600:-1600]
    assert np.sqrt(np.mean(middle * middle)) > 0.6 * 8000 / np.sqrt(2)
    spectrum = np.abs(np.fft.rfft(middle))
    assert abs(np.argmax(spectrum) * 16000 / middle.size - 300) < 5


def test_a_corrupt_frame_is_counted_and_skipped() -> None:
    frames: list[bytes] = []
    inbound = InboundAudio(frames.append)
    good = opus_frames(tone(0.2, 440.0))
    for encoded in good[:5]:
        inbound.put((OPUS, encoded))
    inbound.put((OPUS, SimpleNamespace(data=b"\xff" * 3, timestamp=0)))
    for encoded in good[5:]:
        inbound.put((OPUS, encoded))
    inbound.put(None)  # what the receiver sends when it stops
    assert len(frames) >= 8 and inbound.decode_errors <= 1


async def test_attach_takes_over_the_receivers_queue_and_its_thread_ends() -> None:
    pc = RTCPeerConnection()
    receiver = pc.addTransceiver("audio").receiver
    inbound = InboundAudio(lambda frame: None)
    inbound.attach(receiver)
    assert receiver._RTCRtpReceiver__decoder_queue is inbound  # aiortc 1.16's names
    assert inbound.get() is None, "the decoder thread is told to end at once"
    await pc.close()


async def test_attach_gives_the_receiver_our_jitter_buffer_and_a_renegotiation_keeps_it() -> None:
    pc = RTCPeerConnection()
    receiver = pc.addTransceiver("audio").receiver
    inbound = InboundAudio(lambda frame: None, hold=2)
    inbound.attach(receiver)
    buffer = receiver._RTCRtpReceiver__jitter_buffer  # the name aiortc 1.16 uses
    assert isinstance(buffer, AudioJitter) and buffer is inbound.jitter and buffer.hold == 2
    assert AudioJitter.install(receiver, 2) is buffer  # a renegotiation keeps its packets
    await pc.close()
    await asyncio.sleep(0)


def lossy_tone_packets(fec: int) -> list[bytes]:
    """A steady 440 Hz tone as 20 ms Opus packets, with in-band FEC for ``fec`` % loss."""
    encoder = Encoder(48000, 32000, 5)
    encoder.expect_loss(fec)
    samples = tone(1.0, 440.0)
    return [encoder.encode(samples[i : i + 960].tobytes()) for i in range(0, 48000, 960)]


def test_lost_packets_are_concealed_so_the_audio_keeps_time() -> None:
    for fec in (0, 20):  # extrapolated, and rebuilt from the next packet's copy
        frames: list[bytes] = []
        inbound = InboundAudio(frames.append)
        packets = lossy_tone_packets(fec)
        for i, data in enumerate(packets):
            if i in (20, 30, 31):
                continue  # never arrived
            lost = 1 if i == 21 else 2 if i == 32 else 0
            inbound.put((OPUS, Released(i * 960, [(data, lost)])))
        assert inbound.concealed == 3 and inbound.decode_errors == 0
        # Every packet's 20 ms is there, the three lost ones included, in one chunk each.
        assert len(frames) == len(packets) - 3
        pcm = np.frombuffer(b"".join(frames), np.int16).astype(np.float32)
        assert pcm.size == 320 * len(packets)
        # Where packet 20 was, the tone goes on (not a hole of silence).
        hole = pcm[20 * 320 : 21 * 320]
        assert np.sqrt(np.mean(hole * hole)) > 0.3 * 8000 / np.sqrt(2), fec


def test_a_long_outage_is_not_filled_in() -> None:
    frames: list[bytes] = []
    inbound = InboundAudio(frames.append)
    packets = lossy_tone_packets(0)
    inbound.put((OPUS, Released(0, [(packets[0], 0)])))
    inbound.put((OPUS, Released(960, [(packets[1 + MAX_CONCEALED + 1], MAX_CONCEALED + 1)])))
    assert inbound.concealed == 0
    assert sum(len(f) for f in frames) // 2 == 320 * 2
