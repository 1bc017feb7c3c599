"""libopus through ctypes: one mono encoder or decoder, 20 ms frames, at the rate we want.

Through PyAV, each inbound frame became a Packet and an AudioFrame, and each outbound one an
AudioFrame and a Packet, around the same libopus calls; and its encoder's complexity is
fixed at 10. Measured on this machine, per 20 ms frame of speech: encode at complexity 10
~380 µs, at 5 ~190 µs (server/media/opus.py). libopus can decode straight to 16 kHz
(35 µs against 85 to 100 µs for decode and resample), which inbound audio does
(server/media/inbound_audio.py), and conceals a lost packet from the next one's
redundant copy (in-band FEC, which browsers send once they see loss) or by extrapolating
(PLC). A handful of C functions do not justify a wrapper package (``opuslib`` is
unmaintained), so they are bound here.

The library is the system's ``libopus.so.0`` when there is one, else the copy PyAV's
wheel carries (which every install has).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import weakref

import av

APPLICATION_VOIP = 2048  # SILK or hybrid for speech: a browser's microphone
APPLICATION_RESTRICTED_LOWDELAY = 2051  # CELT alone, 4 ms less delay
SET_BITRATE = 4002
SET_COMPLEXITY = 4010
SET_INBAND_FEC = 4012
SET_PACKET_LOSS_PERC = 4014
SET_MAX_BANDWIDTH = 4004
# Audio bandwidths (Hz of audio each codes up to): wide 8 kHz, super-wide 12, full 20.
BANDWIDTHS = ((8000, 1103), (12000, 1104), (20000, 1105))
MAX_PACKET = 1500  # bytes: one RTP payload


def _load() -> ctypes.PyDLL:
    name = ctypes.util.find_library("opus")
    if name is None:
        bundled = os.path.join(os.path.dirname(av.__file__), os.pardir, "av.libs", "libopus*")
        found = sorted(glob.glob(bundled))
        if not found:
            raise RuntimeError("libopus not found: install libopus0 (Debian) or PyAV's wheel")
        name = found[0]
    # PyDLL keeps the GIL through each call: a call is 35 to 190 µs, and a released GIL
    # goes to whichever thread wants it, the event loop waiting up to the switch interval
    # (5 ms) to have it back.
    lib = ctypes.PyDLL(name)
    error = ctypes.POINTER(ctypes.c_int)
    lib.opus_encoder_create.restype = ctypes.c_void_p
    lib.opus_encoder_create.argtypes = [ctypes.c_int32, ctypes.c_int, ctypes.c_int, error]
    lib.opus_encoder_destroy.argtypes = [ctypes.c_void_p]
    lib.opus_encode.restype = ctypes.c_int32
    lib.opus_encode.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int32
    ]  # fmt: skip
    lib.opus_decoder_create.restype = ctypes.c_void_p
    lib.opus_decoder_create.argtypes = [ctypes.c_int32, ctypes.c_int, error]
    lib.opus_decoder_destroy.argtypes = [ctypes.c_void_p]
    lib.opus_decode.restype = ctypes.c_int
    lib.opus_decode.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int,
        ctypes.c_int,
    ]  # fmt: skip
    lib.opus_packet_get_nb_samples.restype = ctypes.c_int
    lib.opus_packet_get_nb_samples.argtypes = [ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32]
    return lib


_lib = _load()


class OpusError(ValueError):
    """libopus refused a packet or a setting (its negative error code is in the text)."""


def _check(code: int, what: str) -> int:
    if code < 0:
        raise OpusError(f"opus {what} failed: error {code}")
    return code


class Encoder:
    """Mono s16 PCM at ``rate`` → one Opus packet per frame (any Opus frame length)."""

    def __init__(
        self, rate: int, bitrate: int, complexity: int, application: int = APPLICATION_VOIP
    ) -> None:
        error = ctypes.c_int()
        handle = _lib.opus_encoder_create(rate, 1, application, ctypes.byref(error))
        _check(error.value, "encoder_create")
        self._handle = ctypes.c_void_p(handle)
        weakref.finalize(self, _lib.opus_encoder_destroy, handle)
        # opus_encoder_ctl is variadic: each argument is typed where it is passed.
        for request, value in ((SET_BITRATE, bitrate), (SET_COMPLEXITY, complexity)):
            _check(_lib.opus_encoder_ctl(self._handle, request, ctypes.c_int32(value)), "ctl")
        self._out = ctypes.create_string_buffer(MAX_PACKET)

    def expect_loss(self, percent: int) -> None:
        """Send in-band FEC (a coarse copy of each frame in the next packet) sized for
        ``percent`` % packet loss; 0 turns it off."""
        for request, value in ((SET_INBAND_FEC, int(percent > 0)), (SET_PACKET_LOSS_PERC, percent)):
            _check(_lib.opus_encoder_ctl(self._handle, request, ctypes.c_int32(value)), "ctl")

    def limit_bandwidth(self, hz: int) -> None:
        """Code audio up to the narrowest of Opus's bandwidths that covers ``hz``: what
        lies above is empty, and its bands cost bits and time for nothing."""
        value = next((v for top, v in BANDWIDTHS if hz <= top), BANDWIDTHS[-1][1])
        _check(_lib.opus_encoder_ctl(self._handle, SET_MAX_BANDWIDTH, ctypes.c_int32(value)), "ctl")

    def encode(self, pcm: bytes) -> bytes:
        """One packet for ``pcm`` (a whole frame: 2.5 to 60 ms of samples)."""
        size = _lib.opus_encode(self._handle, pcm, len(pcm) // 2, self._out, MAX_PACKET)
        return self._out.raw[: _check(size, "encode")]


class Decoder:
    """Opus packets → mono s16 PCM at ``rate`` (8, 12, 16, 24 or 48 kHz)."""

    def __init__(self, rate: int) -> None:
        error = ctypes.c_int()
        handle = _lib.opus_decoder_create(rate, 1, ctypes.byref(error))
        _check(error.value, "decoder_create")
        self._handle = ctypes.c_void_p(handle)
        weakref.finalize(self, _lib.opus_decoder_destroy, handle)
        self.rate = rate
        self._max_samples = rate * 120 // 1000  # the longest packet Opus allows
        self._pcm = ctypes.create_string_buffer(self._max_samples * 2)

    def decode(self, packet: bytes) -> bytes:
        """The packet's audio (raises :class:`OpusError` on a corrupt packet)."""
        if not packet:
            raise OpusError("opus decode failed: empty packet")
        n = _lib.opus_decode(self._handle, packet, len(packet), self._pcm, self._max_samples, 0)
        return self._pcm.raw[: _check(n, "decode") * 2]

    def conceal(self, lost: int, following: bytes) -> bytes:
        """Audio for ``lost`` packets that never came, each as long as ``following``
        (the packet after them, not yet decoded): the last from its in-band FEC when it
        carries one, the others (and the last without FEC) extrapolated by libopus."""
        samples = _check(
            _lib.opus_packet_get_nb_samples(following, len(following), self.rate), "samples"
        )
        out = []
        for i in range(lost):
            fec = i == lost - 1
            data, size = (following, len(following)) if fec else (None, 0)
            n = _lib.opus_decode(self._handle, data, size, self._pcm, samples, int(fec))
            out.append(self._pcm.raw[: _check(n, "conceal") * 2])
        return b"".join(out)
