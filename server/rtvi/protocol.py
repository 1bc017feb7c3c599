"""RTVI protocol models (label ``rtvi-ai``), the versions served, and message builders.

Two protocol versions are served side by side, chosen per client by the version its
``client-ready`` announces: a 1.x client is told 1.4.0 and gets the 1.4 messages (as it
always did), a 2.x client is told 2.1.0 and gets 2.1's (``bot-output`` with spoken
progress, ``vad-user-*``, and it may send ``dtmf``). Any other major, or none, gets an
``error-response`` and is then served as 1.x: the session goes on. What differs between
the two is produced in :mod:`server.rtvi.versions`; server → client ``data`` models live
in :mod:`server.rtvi.server_messages`.

Client messages are validated in two steps: the envelope (``label``, ``type``, ``id``,
``data``), then the ``data`` of the types we know. Both raise :class:`RTVIError`, which
carries the message id (when there was one) so the answer can be an ``error-response``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipeline.ui.protocol import UICancelJobGroupData, UIEventData, UISnapshotData
from server.rtvi.server_messages import (
    BotReadyData,
    ErrorData,
    ErrorResponseData,
    ServerResponseData,
    build,
)

# What ``bot-ready`` announces, by the major of the client's announced version.
SERVED_VERSIONS = {1: "1.4.0", 2: "2.1.0"}
PROTOCOL_VERSION = SERVED_VERSIONS[1]  # until a client announces 2.x
LABEL = "rtvi-ai"
SUPPORTED_MAJORS = tuple(SERVED_VERSIONS)
# Keys one ``dtmf`` message may carry (a phone entry is at most 32 keys too).
MAX_DTMF_KEYS = 32


class RTVIError(Exception):
    """A client message that cannot be served; ``msg_id`` is set when the message had one.

    ``reason`` names the kind of error without the particulars (which may come from the
    client): records count errors by it. By default, the text before the first colon."""

    def __init__(self, error: str, msg_id: str | None = None, reason: str | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.msg_id = msg_id
        self.reason = reason if reason is not None else error.split(":", 1)[0]


class Envelope(BaseModel):
    """The frame every RTVI message shares."""

    model_config = ConfigDict(extra="ignore")

    label: Literal["rtvi-ai"]
    type: str
    id: str
    data: dict[str, Any] | None = None


# The longest name or version a client's self-description keeps: the session listing
# shows them to every caller, and a real one is a few dozen characters.
MAX_ABOUT_CHARS = 200
# Cut rather than refused: an odd client still gets its bot-ready.
Short = Annotated[str, AfterValidator(lambda text: text[:MAX_ABOUT_CHARS])]


class AboutClient(BaseModel):
    """What the client says about itself in ``client-ready`` (the rest is ignored)."""

    model_config = ConfigDict(extra="ignore")

    library: Short
    library_version: Short | None = None
    platform: Short | None = None
    platform_version: Short | None = None


class ClientReadyData(BaseModel):
    """``client-ready``. Both fields are optional here so that an old or odd client is
    still answered with ``bot-ready`` (after an ``error-response`` about the version)."""

    version: Short | None = None
    about: AboutClient | None = None


class ClientMessageData(BaseModel):
    """``client-message``: an app-defined request ``t`` with payload ``d``."""

    t: str
    d: Any | None = None


class SendTextOptions(BaseModel):
    run_immediately: bool = True
    audio_response: bool = True


class SendTextData(BaseModel):
    content: str
    options: SendTextOptions | None = None


class DisconnectBotData(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCallResultData(BaseModel):
    """``llm-function-call-result``: the client's answer to a client-side tool call."""

    function_name: str
    tool_call_id: str
    arguments: dict[str, Any] = {}
    result: dict[str, Any] | str


class DTMFData(BaseModel):
    """``dtmf`` (RTVI 2.x): keys pressed on the client's keypad, in order. 2.1 sends them
    as ``buttons``; 2.0 sent one key per message as ``button``. Which keys exist is the
    keypad's to say (:mod:`pipeline.turns.keypad`)."""

    button: str | None = None
    buttons: list[str] | None = Field(default=None, min_length=1, max_length=MAX_DTMF_KEYS)

    @model_validator(mode="after")
    def _one_form(self) -> DTMFData:
        if (self.button is None) == (self.buttons is None):
            raise ValueError("give either buttons (RTVI 2.1) or button (2.0)")
        return self

    @property
    def keys(self) -> list[str]:
        return [self.button] if self.button is not None else list(self.buttons or ())


# The client message types we understand, and the model of their ``data``.
CLIENT_DATA_MODELS: dict[str, type[BaseModel]] = {
    "client-ready": ClientReadyData,
    "client-message": ClientMessageData,
    "send-text": SendTextData,
    "disconnect-bot": DisconnectBotData,
    "llm-function-call-result": FunctionCallResultData,
    "dtmf": DTMFData,  # 2.x only: the handler refuses it from a 1.x client
    # The UI worker protocol (server/rtvi/ui_worker.py).
    "ui-event": UIEventData,
    "ui-snapshot": UISnapshotData,
    "ui-cancel-job-group": UICancelJobGroupData,
}


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "message"
    return f"{where}: {err['msg']}"


def parse_envelope(raw: Any) -> Envelope:
    """Validate decoded JSON as an RTVI envelope, or raise :class:`RTVIError`."""
    if not isinstance(raw, dict):
        raise RTVIError("an RTVI message must be a JSON object")
    msg_id = raw.get("id") if isinstance(raw.get("id"), str) else None
    try:
        return Envelope.model_validate(raw)
    except ValidationError as exc:
        raise RTVIError(f"invalid RTVI message: {_first_error(exc)}", msg_id) from None


def parse_data(envelope: Envelope) -> BaseModel:
    """Validate the ``data`` of a known client message type, or raise :class:`RTVIError`."""
    model = CLIENT_DATA_MODELS.get(envelope.type)
    if model is None:
        raise RTVIError(f"unknown message type: {envelope.type!r}", envelope.id)
    try:
        return model.model_validate(envelope.data or {})
    except ValidationError as exc:
        raise RTVIError(f"invalid {envelope.type} data: {_first_error(exc)}", envelope.id) from None


# ``major[.minor[.patch]]`` in ASCII digits, with an optional semver suffix. ASCII only:
# ``str.isdigit`` takes "²" or "٣", which ``int`` then refuses.
VERSION = re.compile(r"([0-9]{1,9})(?:\.[0-9]{1,9}){0,2}(?:[-+][0-9A-Za-z.+-]{1,64})?", re.ASCII)


def version_major(version: str | None) -> int | None:
    """The major number of a ``x.y.z`` version string, or None if it is no such version."""
    match = VERSION.fullmatch(version or "")
    return int(match.group(1)) if match else None


def version_error(version: str | None) -> str | None:
    """What is wrong with a client's announced protocol version (None: nothing)."""
    if version is not None and VERSION.fullmatch(version) is None:
        return (
            f"invalid RTVI version {version[:40]!r}: expected major.minor.patch in "
            f"ASCII digits, e.g. {SERVED_VERSIONS[2]}; served as {PROTOCOL_VERSION}"
        )
    if version_major(version) not in SUPPORTED_MAJORS:
        return (
            f"unsupported RTVI version {version!r}; this server speaks "
            f"{' and '.join(SERVED_VERSIONS.values())} (majors 1 and 2): served as "
            f"{PROTOCOL_VERSION}"
        )
    return None


def served_version(version: str | None) -> str:
    """The version a client that announced ``version`` is served: the newest of its
    major, or 1.4.0 when it announced no major we serve."""
    return SERVED_VERSIONS.get(version_major(version) or 0, PROTOCOL_VERSION)


def message(type_: str, data: Any = None, msg_id: str | None = None) -> dict[str, Any]:
    """A server → client RTVI message (``data`` a model of :mod:`server.rtvi.server_messages`,
    or plain JSON)."""
    return build(type_, data, msg_id)


def bot_ready(
    msg_id: str, about: dict[str, Any], version: str = PROTOCOL_VERSION
) -> dict[str, Any]:
    return build("bot-ready", BotReadyData(version=version, about=about), msg_id)


def error_response(msg_id: str, error: str) -> dict[str, Any]:
    return build("error-response", ErrorResponseData(error=error), msg_id)


def error(error: str, fatal: bool = False) -> dict[str, Any]:
    return build("error", ErrorData(error=error, fatal=fatal))


def server_response(msg_id: str, t: str, d: Any = None) -> dict[str, Any]:
    return build("server-response", ServerResponseData(t=t, d=d), msg_id)
