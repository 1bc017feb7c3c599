"""A telephone line for test audio: 16 kHz speech down to 8 kHz, through G.711 μ-law, and
back up to 16 kHz, as a caller's voice reaches the server from a phone provider's media
stream (Twilio, Telnyx: base64 μ-law at 8 kHz); the server's own codec
(:mod:`server.telephony.g711`) does it."""

from __future__ import annotations

import numpy as np

from server.telephony.g711 import G711Decoder, G711Encoder

WIDE = 16000


def phone_line(samples: np.ndarray) -> np.ndarray:
    """16 kHz s16 speech as it arrives over a narrowband μ-law line (16 kHz again, the
    same length: the resamplers' few samples of delay are cut from the front)."""
    coded = G711Encoder().encode(np.ascontiguousarray(samples, np.int16).tobytes(), WIDE)
    wide = np.frombuffer(G711Decoder().decode(coded), np.int16)
    out = np.zeros(samples.size, np.int16)
    out[: min(wide.size, out.size)] = wide[: out.size]
    return out
