"""Which provider is on the other end of a media-stream WebSocket, from its first messages.

Vonage opens with ``websocket:connected``. Twilio, Telnyx and Exotel all open with
``{"event": "connected"}`` and Plivo with its ``start``, so the ``start`` decides, by the
names of its ids: Twilio ``start.streamSid``/``callSid``, Plivo ``start.streamId``/
``callId``, Exotel ``start.stream_sid``/``call_sid``, Telnyx a top-level ``stream_id`` with
``start.call_control_id``. The chosen stream then checks the format itself (a Twilio
start in the wrong format is refused by :class:`TwilioStream`, with Twilio's reason).

A ``?provider=`` query parameter skips the guessing: :func:`stream_for`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from server.telephony.exotel import ExotelStream
from server.telephony.json_messages import event_name, load
from server.telephony.plivo import PlivoStream
from server.telephony.stream_events import ProviderStream, StreamProtocolError
from server.telephony.telnyx import TelnyxStream
from server.telephony.twilio import TwilioStream
from server.telephony.vonage import VonageStream, is_opening

PROVIDERS: dict[str, type[ProviderStream]] = {
    "twilio": TwilioStream,
    "telnyx": TelnyxStream,
    "plivo": PlivoStream,
    "exotel": ExotelStream,
    "vonage": VonageStream,
}
MAX_UNDECIDED = 3  # "connected" messages before a start: the providers send one at most


def _inside(*keys: str) -> Callable[[dict[str, Any]], bool]:
    return lambda body: all(k in body["start"] for k in keys)


# What only that provider's start carries.
_STARTS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "twilio": _inside("streamSid", "callSid"),
    "plivo": _inside("streamId", "callId"),
    "exotel": _inside("stream_sid", "call_sid"),
    "telnyx": lambda body: "stream_id" in body and "call_control_id" in body["start"],
}


def stream_for(name: str) -> ProviderStream:
    """A new stream in the named provider's dialect (``?provider=`` chose it)."""
    provider = PROVIDERS.get(name)
    if provider is None:
        raise StreamProtocolError(f"unknown provider {name!r}: one of {', '.join(PROVIDERS)}")
    return provider()


class ProviderDetector:
    """Decides the provider from the first messages of one WebSocket. :meth:`feed` each
    message until it returns the stream; then give that message, and every later one, to
    the stream's ``parse``."""

    def __init__(self) -> None:
        self.stream: ProviderStream | None = None
        self._seen = 0

    def feed(self, message: str | bytes) -> ProviderStream | None:
        """The stream once ``message`` decides it; None while undecided (a
        ``connected``). Raises :class:`StreamProtocolError` if no provider would send it."""
        if self.stream is not None:
            return self.stream
        if not isinstance(message, str):
            raise StreamProtocolError("a binary message before the provider is known")
        name = self._decide(load(message, "the provider"))
        if name is not None:
            self.stream = stream_for(name)
            return self.stream
        self._seen += 1
        if self._seen >= MAX_UNDECIDED:
            raise StreamProtocolError(f"no start in the first {MAX_UNDECIDED} messages")
        return None

    def _decide(self, body: dict[str, Any]) -> str | None:
        if is_opening(body):
            return "vonage"
        kind = event_name(body)
        if kind == "connected":
            return None
        if kind != "start" or not isinstance(body.get("start"), dict):
            raise StreamProtocolError(f"{kind!r} before the provider is known")
        names = [name for name, matches in _STARTS.items() if matches(body)]
        if not names:
            fields = sorted(body["start"])
            raise StreamProtocolError(f"a start no provider sends (its fields: {fields})")
        if len(names) > 1:
            raise StreamProtocolError(f"a start that fits {' and '.join(names)} at once")
        return names[0]
