"""One call recording's file: two channels of 16 kHz PCM encoded to Opus in an Ogg file as
they come (:class:`server.storage.recording.CallRecording` feeds it from its worker
thread; nothing here runs on the event loop).

Ogg pages are pushed to the file as they are made (at most every ``PAGE_SECONDS``), so a
crash loses the last second or two, not the call: an Ogg file cut short decodes up to
its last whole page.
"""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
from av.audio.stream import AudioStream

RATE = 16000  # what every transport hands the pipeline; the bot is brought down to it
# Stereo speech at 16 kHz, ~190 KB a minute (bench/recording.py measures it).
BIT_RATE = 32000
# What libopus is asked for, measured on a minute of call audio (bench/recording.py's):
# effort 0 of 10 and 60 ms frames took 0.21-0.26 s of CPU a minute, effort 3 and 20 ms
# frames 0.35 s, 5 0.37 s, 10 about twice that. The price is crosstalk: the coupled
# stereo coder lets a channel's tone into the other at -30 dB (-32 at effort 3, -44 at
# 5; at 24 kb/s -23 dB). Two uncoupled streams (mapping family 255) separate them fully
# (-81 dB) for 0.39-0.47 s a minute: past the budget of 1 % of a core per call.
ENCODER_OPTIONS = {"compression_level": "0", "frame_duration": "60"}
PAGE_SECONDS = 0.5


class OpusFile:
    """An Ogg/Opus file of stereo 16 kHz s16 audio, written as it is given."""

    def __init__(self, path: Path, bit_rate: int = BIT_RATE) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.samples = 0  # per channel, written so far
        self._file = path.open("wb")
        try:
            self._container = av.open(
                self._file,
                "w",
                format="ogg",
                # Each packet pushed through to our file object, each page at most a
                # half second long: what was encoded reaches the disk within about a second.
                container_options={
                    "flush_packets": "1",
                    "page_duration": str(int(PAGE_SECONDS * 1_000_000)),
                },
                buffer_size=4096,
            )
            stream = self._container.add_stream(
                "libopus",
                rate=RATE,
                layout="stereo",
                options=ENCODER_OPTIONS,
            )
        except Exception:
            self._file.close()
            raise
        assert isinstance(stream, AudioStream)
        stream.bit_rate = bit_rate
        self._stream = stream

    def write(self, stereo: np.ndarray) -> None:
        """Encode interleaved stereo int16 samples (left, right, left, ...)."""
        if not len(stereo):
            return
        # Exact digital zeros (padded silence, a muted microphone) cost libopus about
        # three times the CPU of speech; with the lowest bit set (-90 dB, inaudible) they
        # cost a seventh of it (measured for bench/recording.py).
        samples = (stereo | 1).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="stereo")
        frame.sample_rate = RATE
        frame.pts = self.samples
        self.samples += len(stereo) // 2
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self._file.flush()

    @property
    def seconds(self) -> float:
        return self.samples / RATE

    def close(self) -> None:
        """Encode what the encoder holds and write the file's last page."""
        try:
            for packet in self._stream.encode(None):
                self._container.mux(packet)
            self._container.close()
        finally:
            self._file.close()
