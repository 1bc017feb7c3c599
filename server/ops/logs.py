"""Log output: human-readable lines, or one compact JSON object per line (``log_json``).

Every line logged on behalf of a session carries its id (``session``: the ``pc_id``):
the session runs its tasks and callbacks inside ``logger.contextualize(session=...)``.
In JSON mode the standard-library loggers (uvicorn, aiortc, aioice) are routed through
loguru as well, so that every line of the process is JSON.

No handler is ever added with loguru's ``diagnose`` (its default): it annotates a
traceback with the value of every local variable, which puts what clients sent (messages,
transcripts, app data) into the logs. Tracebacks keep file, line and code only.

Credentials in a URL (``?api_key=``, ``?token=``: clients that cannot set headers send
them so) are redacted from uvicorn's lines (:func:`redact_uvicorn_logs`): its access line
prints the path with its query.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import traceback
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import unquote_plus

from loguru import logger

if TYPE_CHECKING:
    from loguru import Record

# Query parameters that carry a credential (their names as Starlette decodes them).
SECRET_PARAMETERS = frozenset({"api_key", "token"})
_QUERY = re.compile(r"\?([^\s\"'#]*)")
# Fields of a loguru record that are not copied as such into a JSON line.
_RESERVED = {"time", "level", "message", "logger", "function", "line", "exception"}


def json_fields(record: dict[str, Any]) -> dict[str, Any]:
    """The fields of one log record's JSON line; ``extra`` (e.g. ``session``) is flattened."""
    line: dict[str, Any] = {
        "time": record["time"].isoformat(timespec="milliseconds"),
        "level": record["level"].name,
        "message": record["message"],
        "logger": record["name"],
        "function": record["function"],
        "line": record["line"],
    }
    for key, value in record["extra"].items():
        line[key if key not in _RESERVED else f"extra_{key}"] = value
    exception = record["exception"]
    if exception is not None and exception.type is not None:
        line["exception"] = f"{exception.type.__name__}: {exception.value}"
        if exception.traceback is not None:
            trace = traceback.format_exception(exception.type, exception.value, exception.traceback)
            line["traceback"] = "".join(trace)
    return line


class JSONSink:
    """A loguru sink that writes one JSON object per record and line."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, message: Any) -> None:
        fields = json_fields(message.record)
        self.stream.write(json.dumps(fields, default=str, ensure_ascii=False) + "\n")
        self.stream.flush()


class InterceptHandler(logging.Handler):
    """Sends standard-library log records to loguru (keeping the logger's name)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno

        def patch(r: Record) -> None:
            r["name"] = record.name
            r["function"] = record.funcName
            r["line"] = record.lineno

        logger.patch(patch).opt(exception=record.exc_info).log(level, record.getMessage())


TEXT_FORMAT = (
    "<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> | <level>{level: <8}</level> | "
    "<cyan>{name}</cyan>:<cyan>{function}</cyan>:<cyan>{line}</cyan> - "
)


def text_format(record: Record) -> str:
    """loguru's usual line, with ``[session]`` before the message of a session's lines."""
    session = "[{extra[session]}] " if "session" in record["extra"] else ""
    return TEXT_FORMAT + session + "<level>{message}</level>\n{exception}"


# Every handler: no variable values in tracebacks (client data), no frames above the catch.
SAFE_TRACEBACKS: dict[str, Any] = {"diagnose": False, "backtrace": False}


def configure_logging(level: str, as_json: bool, stream: TextIO = sys.stderr) -> None:
    """Replace loguru's default sink; in JSON mode, route stdlib logging through it."""
    logger.remove()
    if not as_json:
        logger.add(stream, level=level, format=text_format, **SAFE_TRACEBACKS)
        return
    logger.add(JSONSink(stream).write, level=level, format="{message}", **SAFE_TRACEBACKS)
    std_level = logging.DEBUG if level in ("TRACE", "DEBUG") else logging.getLevelName(level)
    logging.basicConfig(handlers=[InterceptHandler()], level=logging.WARNING, force=True)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        std = logging.getLogger(name)
        std.handlers = [InterceptHandler()]
        std.setLevel(std_level)
        std.propagate = False


def redact(text: str) -> str:
    """``text`` with the value of every credential parameter of a URL's query replaced."""

    def query(match: re.Match[str]) -> str:
        pairs = match.group(1).split("&")
        for i, pair in enumerate(pairs):
            name, equals, _ = pair.partition("=")
            if equals and unquote_plus(name).lower() in SECRET_PARAMETERS:
                pairs[i] = f"{name}=[redacted]"
        return "?" + "&".join(pairs)

    return _QUERY.sub(query, text) if "?" in text else text


class RedactSecrets(logging.Filter):
    """Redacts credentials in a URL's query from a record's message and arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        return True


def redact_uvicorn_logs() -> None:
    """Add :class:`RedactSecrets` to the loggers uvicorn writes requests to (its access
    lines, and its WebSocket lines, which go to ``uvicorn.error``)."""
    for name in ("uvicorn.error", "uvicorn.access"):
        std = logging.getLogger(name)
        if not any(isinstance(f, RedactSecrets) for f in std.filters):
            std.addFilter(RedactSecrets())
