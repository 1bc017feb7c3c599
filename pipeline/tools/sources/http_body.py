"""Response bodies decoded in bounded pieces, so that a reader with a bound stops in time.

A compressed body can be tiny on the wire and huge decoded: ``Content-Encoding: gzip,
gzip`` makes 245 bytes 48 MB. httpx decodes each network chunk whole before its reader
sees any of it, so a bound on what the reader keeps comes too late (one 48 MB chunk,
measured 125 MB at the heap's peak for one call). Here zlib undoes each coding with
``max_length``: a piece of at most :data:`PIECE_BYTES` at a time, made only when the
reader asks for the next one. A reader that stops at its bound has made at most one
piece more than it kept, whatever the ratio.

Why decode, rather than ask for ``identity`` and refuse an encoded body: an endpoint may
compress whatever the request says (a file stored gzipped and served with its
``Content-Encoding``, a proxy in front), and such a tool would then fail every call,
while decoding in bounded pieces costs no more memory than refusing. Only gzip is asked
for (:data:`ACCEPT_ENCODING`); gzip and deflate are decoded, at most
:data:`MAX_CODINGS` deep, and any other coding (br, zstd, compress) is refused with
:class:`UnsupportedEncoding` rather than handed on as if it were text.

Used by the HTTP tools (:mod:`pipeline.tools.sources.http`, over httpx) and the
streamable-HTTP MCP client (:mod:`pipeline.tools.sources.mcp_http`, over httpx2).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

__all__ = [
    "ACCEPT_ENCODING",
    "PIECE_BYTES",
    "BodyDecodeError",
    "BodyDecoder",
    "UnsupportedEncoding",
]

ACCEPT_ENCODING = "gzip"
PIECE_BYTES = 64 * 1024
MAX_CODINGS = 2  # "gzip, gzip" has no use but to multiply the ratio; more is refused
_WBITS = {
    "gzip": 16 + zlib.MAX_WBITS,
    "x-gzip": 16 + zlib.MAX_WBITS,
    "deflate": zlib.MAX_WBITS,  # the zlib format, as RFC 9110 says deflate is
}


class UnsupportedEncoding(ValueError):
    """A ``Content-Encoding`` this client does not decode."""


class BodyDecodeError(ValueError):
    """A body that does not decode as its ``Content-Encoding`` says."""


class BodyDecoder:
    """Undoes one response's content codings, in pieces of at most :data:`PIECE_BYTES`."""

    def __init__(self, content_encoding: str) -> None:
        """Raises :class:`UnsupportedEncoding` for a coding not decoded here, or too many."""
        named = [c.strip().lower() for c in content_encoding.split(",")]
        codings = [c for c in named if c and c != "identity"]
        unknown = sorted({c for c in codings if c not in _WBITS})
        if unknown:
            raise UnsupportedEncoding(
                f"Content-Encoding {', '.join(unknown)} is not decoded (only gzip and deflate)"
            )
        if len(codings) > MAX_CODINGS:
            raise UnsupportedEncoding(
                f"Content-Encoding {content_encoding!r}: more than {MAX_CODINGS} codings"
            )
        # The coding applied last is undone first.
        self._layers = [zlib.decompressobj(_WBITS[c]) for c in reversed(codings)]

    @property
    def identity(self) -> bool:
        return not self._layers

    def decode(self, data: bytes) -> Iterator[bytes]:
        """The decoded pieces of ``data``, each made only when it is asked for; raises
        :class:`BodyDecodeError` (while iterating) for data that does not decode."""
        pieces: Iterator[bytes] = iter((data,))
        for layer in self._layers:
            pieces = _inflate(layer, pieces)
        return pieces


def _inflate(layer: zlib._Decompress, pieces: Iterator[bytes]) -> Iterator[bytes]:
    for piece in pieces:
        try:
            out = layer.decompress(piece, PIECE_BYTES)
            while out:
                yield out
                # What did not fit waits in unconsumed_tail (or inside zlib): next piece.
                out = layer.decompress(layer.unconsumed_tail, PIECE_BYTES)
        except zlib.error as exc:
            message = f"the body does not decode as its Content-Encoding says: {exc}"
            raise BodyDecodeError(message) from exc
