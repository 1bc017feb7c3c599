"""TwiML that connects a call to our media stream, and that stream's URL.

``<Connect><Stream>`` opens a bidirectional stream and holds the call while it lasts
(https://www.twilio.com/docs/voice/twiml/stream). Its ``url`` takes no query string:
Twilio's documentation says so, and its errors 31920 and 31922 name a query string as a
cause and say to "use nested <Parameter> values instead". So the stream token travels as
``<Parameter name="token">``, which Twilio hands back in the ``start`` message's
``customParameters`` (``StreamStarted.parameters``), never in the URL.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from urllib.parse import urlsplit

from server.telephony.signature import public_request_url

STREAM_PATH = "/telephony/ws"
TOKEN_PARAMETER = "token"
_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>'
# What XML 1.0 cannot carry at all, escaped or not: ElementTree would write it as is and
# Twilio would get a document it cannot parse.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_WS_SCHEMES = {"https": "wss", "http": "ws"}


class TwimlError(ValueError):
    """A stream URL or parameter TwiML cannot carry."""


def stream_url(public_url: str, path: str = STREAM_PATH) -> str:
    """The stream's WebSocket URL for the public base URL ``https://host[/prefix]``:
    ``wss://host[/prefix]/telephony/ws`` (``ws://`` from ``http://``, for local tests only:
    Twilio connects to ``wss`` alone)."""
    parts = urlsplit(public_url)
    scheme = _WS_SCHEMES.get(parts.scheme)
    if scheme is None or not parts.netloc or parts.query or parts.fragment:
        raise TwimlError(f"public URL {public_url!r}: want http(s)://host[/prefix]")
    return scheme + public_request_url(public_url, path)[len(parts.scheme) :]


def connect_stream_twiml(stream_url: str, parameters: Mapping[str, str]) -> str:
    """``<Response><Connect><Stream url=…>`` with one ``<Parameter>`` per item, escaped by
    ElementTree; the XML declaration first, as Twilio's helpers write it."""
    parts = urlsplit(stream_url)
    if parts.scheme not in ("wss", "ws") or not parts.netloc:
        raise TwimlError(f"stream URL {stream_url!r}: want wss://host/path")
    if parts.query or parts.fragment:
        raise TwimlError(f"stream URL {stream_url!r}: Twilio drops query strings; use parameters")
    root = ET.Element("Response")
    stream = ET.SubElement(ET.SubElement(root, "Connect"), "Stream")
    stream.set("url", _xml_text(stream_url))
    for name, value in parameters.items():
        if not name:
            raise TwimlError("a stream parameter needs a name")
        ET.SubElement(stream, "Parameter", name=_xml_text(name), value=_xml_text(value))
    return _DECLARATION + ET.tostring(root, encoding="unicode")


def stream_twiml(public_url: str, token: str, parameters: Mapping[str, str] | None = None) -> str:
    """The TwiML that answers a call: connect it to our stream, its ``token`` passed as the
    ``token`` parameter, with any other ``parameters``."""
    extra = dict(parameters or {})
    if TOKEN_PARAMETER in extra:
        raise TwimlError(f"the {TOKEN_PARAMETER!r} parameter is the stream token's")
    return connect_stream_twiml(stream_url(public_url), {TOKEN_PARAMETER: token, **extra})


def _xml_text(value: str) -> str:
    found = _NOT_XML.search(value)
    if found:
        raise TwimlError(f"{value!r}: {found.group()!r} cannot appear in XML")
    return value
