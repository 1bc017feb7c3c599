"""Every server → client RTVI message: the model of its ``data``, and one way to build it.

The table :data:`SERVER_MESSAGES` maps each message type to the model of its ``data``
(``None``: the message has no ``data``; ``Any``: app-defined). :func:`build` makes a
message from a model; fields left out when the model was constructed stay off the wire
(that is how function-call report levels hide names, arguments and results).
:func:`validate` checks a received message against the table (the tests run every
message they get through it). The UI worker protocol's server messages (``ui-command``,
``ui-job-group``) are in it too, with the models of :mod:`pipeline.ui.protocol`. Where
RTVI 1.x and 2.x differ, both shapes are here (``bot-output``: :class:`BotOutputData`,
:class:`BotOutputV2Data`); which one a client gets is :mod:`server.rtvi.versions`' call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from pipeline.ui import protocol as ui_protocol

LABEL = "rtvi-ai"


class _Data(BaseModel):
    """Base of every ``data`` model: unknown fields are a bug on our side."""

    model_config = ConfigDict(extra="forbid")


# -- handshake, requests, errors -------------------------------------------------------------


class BotReadyData(_Data):
    version: str
    about: dict[str, Any] | None = None


class ServerResponseData(_Data):
    """The answer to a ``client-message`` ``t`` (same ``id``)."""

    t: str
    d: Any | None = None


class ErrorResponseData(_Data):
    """A client request (with an ``id``) that failed."""

    error: str


class ErrorData(_Data):
    """Something went wrong; ``fatal``: the session is ending because of it."""

    error: str
    fatal: bool


# -- text -----------------------------------------------------------------------------------


class TextData(_Data):
    """``bot-llm-text``, ``bot-tts-text``, ``bot-transcription``, ``user-llm-text``,
    ``system-log``."""

    text: str


class BotOutputData(_Data):
    """RTVI 1.x ``bot-output``: what the bot said (``spoken``: its audio played) or sent
    as text."""

    text: str
    spoken: bool
    aggregated_by: Literal["sentence", "word"] | str


class SpokenProgressData(_Data):
    """How far playout is into a spoken segment: ``accumulated_text`` (up to and including
    the word playing) and ``remaining_text``, which together make the segment's text."""

    accumulated_text: str
    remaining_text: str


class BotOutputV2Data(_Data):
    """RTVI 2.x ``bot-output``: one segment (a sentence) of the bot's output.

    Spoken (``will_be_spoken``): ``new`` as it starts to play, ``in-progress`` as playout
    reaches each word, ``completed`` once played, all with the same ``segment_id`` and a
    ``spoken_progress``. Not spoken (a text answer): once, without status or progress."""

    text: str
    aggregated_by: Literal["sentence"] | str
    will_be_spoken: bool
    segment_id: int | None = None
    spoken_status: Literal["new", "in-progress", "completed"] | None = None
    spoken_progress: SpokenProgressData | None = None


class UserTranscriptionData(_Data):
    text: str
    user_id: str
    timestamp: str
    final: bool


# -- audio ----------------------------------------------------------------------------------


class AudioLevelData(_Data):
    """Loudness 0..1 (0 at -60 dBFS and below, 1 at full scale)."""

    value: float = Field(ge=0.0, le=1.0)


class AudioData(_Data):
    """``bot-tts-audio``: base64 PCM s16le, as the TTS produced it."""

    audio: str
    sample_rate: int = Field(gt=0)
    num_channels: int = Field(ge=1)


# -- function calls -------------------------------------------------------------------------


class FunctionCallStartedData(_Data):
    function_name: str | None = None


class FunctionCallInProgressData(_Data):
    tool_call_id: str
    function_name: str | None = None
    arguments: Mapping[str, Any] | None = None


class FunctionCallStoppedData(_Data):
    tool_call_id: str
    cancelled: bool
    function_name: str | None = None
    result: Any | None = None


class LegacyFunctionCallData(_Data):
    """``llm-function-call`` (deprecated form of ``llm-function-call-in-progress``)."""

    function_name: str
    tool_call_id: str
    args: Mapping[str, Any]


# -- metrics ----------------------------------------------------------------------------------


class MetricEntry(_Data):
    processor: str
    model: str | None = None
    value: float


class TokensValue(_Data):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class TokensEntry(_Data):
    processor: str
    model: str | None = None
    value: TokensValue


class MetricsData(_Data):
    """One measurement per message, as a list per kind (Pipecat's shape)."""

    ttfb: list[MetricEntry] | None = None
    processing: list[MetricEntry] | None = None
    characters: list[MetricEntry] | None = None
    tokens: list[TokensEntry] | None = None


# -- the UI worker protocol -------------------------------------------------------------------
# The models of pipeline.ui.protocol, closed to unknown fields as every model here is.


class UICommandData(ui_protocol.UICommandData, _Data):
    pass


class UIJobGroupStartedData(ui_protocol.UIJobGroupStartedData, _Data):
    pass


class UIJobUpdateData(ui_protocol.UIJobUpdateData, _Data):
    pass


class UIJobCompletedData(ui_protocol.UIJobCompletedData, _Data):
    pass


class UIJobGroupCompletedData(ui_protocol.UIJobGroupCompletedData, _Data):
    pass


# One of the four lifecycle steps, told apart by ``kind`` (which must be there).
UIJobGroupData = Annotated[
    UIJobGroupStartedData | UIJobUpdateData | UIJobCompletedData | UIJobGroupCompletedData,
    Field(discriminator="kind"),
]


# -- the table ----------------------------------------------------------------------------------

_NO_DATA = (
    "bot-llm-started",
    "bot-llm-stopped",
    "bot-tts-started",
    "bot-tts-stopped",
    "bot-started-speaking",
    "bot-stopped-speaking",
    "bot-interrupted",
    "user-started-speaking",
    "user-stopped-speaking",
    "user-mute-started",
    "user-mute-stopped",
    # RTVI 2.x: the VAD's own start and stop, before turn-taking decides anything.
    "vad-user-started-speaking",
    "vad-user-stopped-speaking",
)

# type → model of ``data`` (None: no data; Any: app-defined).
SERVER_MESSAGES: dict[str, Any] = {
    "bot-ready": BotReadyData,
    "server-response": ServerResponseData,
    "error-response": ErrorResponseData,
    "error": ErrorData,
    "server-message": Any,
    "system-log": TextData,
    "metrics": MetricsData,
    "bot-llm-text": TextData,
    "bot-tts-text": TextData,
    "bot-transcription": TextData,
    "bot-output": BotOutputData | BotOutputV2Data,  # 1.x | 2.x
    "user-llm-text": TextData,
    "user-transcription": UserTranscriptionData,
    "user-audio-level": AudioLevelData,
    "bot-audio-level": AudioLevelData,
    "bot-tts-audio": AudioData,
    "llm-function-call-started": FunctionCallStartedData,
    "llm-function-call-in-progress": FunctionCallInProgressData,
    "llm-function-call-stopped": FunctionCallStoppedData,
    "llm-function-call": LegacyFunctionCallData,
    ui_protocol.UI_COMMAND: UICommandData,
    ui_protocol.UI_JOB_GROUP: UIJobGroupData,
    **dict.fromkeys(_NO_DATA),
}

# Messages that answer a client request carry its ``id``.
WITH_ID = frozenset({"bot-ready", "server-response", "error-response"})


def build(type_: str, data: BaseModel | Any = None, msg_id: str | None = None) -> dict[str, Any]:
    """A server → client message. A model ``data`` is dumped without the fields that
    were not set when it was made; any other ``data`` is sent as it is."""
    msg: dict[str, Any] = {"label": LABEL, "type": type_}
    if msg_id is not None:
        msg["id"] = msg_id
    if isinstance(data, BaseModel):
        msg["data"] = data.model_dump(mode="json", exclude_unset=True)
    elif data is not None:
        msg["data"] = data
    return msg


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def validate(msg: Any) -> Any:
    """Check a server → client message against the table; returns its validated ``data``
    (None when it has none). Raises ``ValueError`` (pydantic's ``ValidationError``
    included) when it does not fit."""
    if not isinstance(msg, dict) or msg.get("label") != LABEL:
        raise ValueError(f"not an RTVI message: {msg!r}")
    type_ = msg.get("type")
    if type_ not in SERVER_MESSAGES:
        raise ValueError(f"unknown server message type {type_!r}")
    if type_ in WITH_ID and not isinstance(msg.get("id"), str):
        raise ValueError(f"{type_} needs the id of the request it answers")
    extra = set(msg) - {"label", "type", "id", "data"}
    if extra:
        raise ValueError(f"{type_}: unexpected keys {sorted(extra)}")
    model = SERVER_MESSAGES[type_]
    if model is None:
        if "data" in msg:
            raise ValueError(f"{type_} has no data")
        return None
    if model is not Any and "data" not in msg:
        raise ValueError(f"{type_} needs data")
    adapter = _ADAPTERS.get(model)
    if adapter is None:
        adapter = _ADAPTERS[model] = TypeAdapter(model)
    return adapter.validate_python(msg.get("data"))
