"""MIME types of image and audio bytes, from their magic bytes, and base64 helpers."""

from __future__ import annotations

import base64
import binascii
from typing import Literal

# Magic-byte prefixes; RIFF containers are told apart by bytes 8..12.
_MAGIC = {
    b"\xff\xd8\xff": "image/jpeg",
    b"\x89PNG": "image/png",
    b"GIF8": "image/gif",
    b"ID3": "audio/mpeg",
    b"\xff\xfb": "audio/mpeg",
    b"\xff\xf3": "audio/mpeg",
    b"\xff\xf2": "audio/mpeg",
    b"OggS": "audio/ogg",
    b"fLaC": "audio/flac",
}
_RIFF = {b"WEBP": "image/webp", b"WAVE": "audio/wav"}
# Unknown images get an obviously-wrong type so the provider rejects them loudly.
_UNKNOWN = {"image": "application/octet-stream", "audio": "audio/mpeg"}
# OpenAI's ``input_audio.format`` names, by MIME type.
AUDIO_FORMATS = {"audio/mpeg": "mp3", "audio/wav": "wav", "audio/ogg": "ogg", "audio/flac": "flac"}


def sniff_mime(data: bytes, kind: Literal["image", "audio"]) -> str:
    """The ``kind/*`` MIME type of ``data`` from its magic bytes."""
    found = _RIFF.get(data[8:12]) if data[:4] == b"RIFF" else None
    found = found or next((m for p, m in _MAGIC.items() if data.startswith(p)), None)
    return found if found and found.startswith(kind) else _UNKNOWN[kind]


def b64_prefix(b64: str) -> bytes:
    """The first bytes of base64 data, enough for magic-byte sniffing."""
    try:
        return base64.b64decode(b64[:32], validate=False)
    except (binascii.Error, ValueError):
        return b""


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
