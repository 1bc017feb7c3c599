"""Scripted failures, and the OpenAI-style error answers the stub sends."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from fastapi.responses import JSONResponse, Response

FaultKind = Literal["status", "hang", "cut", "truncate", "malformed", "stall"]


@dataclass(frozen=True)
class Fault:
    """A scripted failure, by ``kind``:

    - ``http(status, message)``: answer ``status`` with an OpenAI-style error body (its
      ``message``: the stub's usual one for that status unless given);
    - ``hang()``: never answer, until the client gives up;
    - ``cut(after)``: drop the connection mid-body (no finish_reason, no [DONE]);
    - ``truncate(after)``: end the body cleanly mid-stream (no finish_reason, no [DONE]);
    - ``malformed(after)``: send a data line that is not JSON, then go on;
    - ``stall(seconds, after)``: pause the body for ``seconds``, then go on.

    Body faults strike after ``after`` content chunks (audio chunks for TTS). For the
    audio endpoints, ``malformed`` is a 200 that cannot be used: a transcription that is
    not JSON, or (with ``after=0``) speech answered with a JSON body instead of audio.
    """

    kind: FaultKind
    status: int = 500
    after: int = 0
    seconds: float = 0.0
    message: str | None = None

    @classmethod
    def http(cls, status: int, message: str | None = None) -> Fault:
        return cls("status", status=status, message=message)

    @classmethod
    def hang(cls) -> Fault:
        return cls("hang")

    @classmethod
    def cut(cls, after: int = 1) -> Fault:
        return cls("cut", after=after)

    @classmethod
    def truncate(cls, after: int = 1) -> Fault:
        return cls("truncate", after=after)

    @classmethod
    def malformed(cls, after: int = 1) -> Fault:
        return cls("malformed", after=after)

    @classmethod
    def stall(cls, seconds: float, after: int = 1) -> Fault:
        return cls("stall", after=after, seconds=seconds)


_MESSAGES = {
    401: ("Incorrect API key provided.", "invalid_api_key"),
    403: ("You do not have access to this model.", None),
    429: ("Rate limit reached for requests.", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request.", None),
    503: ("The engine is currently overloaded, please try again later.", None),
}


def error_response(status: int, message: str | None = None) -> Response:
    usual, code = _MESSAGES.get(status, (f"Stub error {status}.", None))
    message = usual if message is None else message
    body = {"error": {"message": message, "type": "stub_error", "code": code}}
    return JSONResponse(body, status_code=status)


class Aborted(Exception):
    """Raised inside a streamed body to make uvicorn drop the connection."""


class Truncated(Exception):
    """Ends a streamed body cleanly, before its natural end."""


def not_deliberate(record: logging.LogRecord) -> bool:
    """Keeps uvicorn from logging a traceback for each scripted connection cut."""
    return not (record.exc_info and isinstance(record.exc_info[1], Aborted))
