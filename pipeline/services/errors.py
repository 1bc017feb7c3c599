"""Typed errors for model services, and the one place ``openai`` failures are read.

Every error's ``str()`` is a short human sentence: the conversation sends it to the
client as an RTVI ``error`` (``fatal=false``), so it names the service and says what to
check, and nothing more. What the endpoint itself said (an error body, an error event in
a stream) and connection details (addresses, resolver and TLS errors) can hold keys,
internal hosts or account data: they never go into ``str()``, but into ``detail``, and
:func:`map_error` logs them in full (WARNING) once per failure, for the operator.
``retryable`` tells a caller whether the same request may succeed if sent again
(connection problems, timeouts, 429 and 5xx); it is never true for a bad key or a
malformed answer. Only STT and TTS retry (see :mod:`pipeline.services.retry`): the LLM does not,
since its text may already have been spoken.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import httpx2
import openai
from loguru import logger

# The longest upstream detail logged: a JSON error body fits many times over; a proxy's
# HTML error page is cut rather than flooding the log.
MAX_LOGGED_DETAIL = 16_000

# Human names for the service labels used across the pipeline.
_NAMES = {
    "llm": "The LLM service",
    "stt": "The speech-to-text service",
    "tts": "The text-to-speech service",
}


def service_name(service: str) -> str:
    """``"llm"`` → ``"The LLM service"``; unknown labels are used as they are."""
    return _NAMES.get(service, f"The {service} service")


class ServiceError(Exception):
    """A model service failed. ``str(error)`` is the message for the user."""

    default_retryable: ClassVar[bool] = False

    def __init__(
        self,
        service: str,
        message: str,
        *,
        retryable: bool | None = None,
        status: int | None = None,
        detail: str = "",
    ) -> None:
        super().__init__(message)
        self.service = service
        self.message = message
        self.retryable = self.default_retryable if retryable is None else retryable
        self.status = status  # the HTTP status, when there was one
        self.detail = detail  # what the endpoint or the connection said: for logs only


class ServiceUnreachableError(ServiceError):
    """No connection could be made (refused, DNS, TLS, dropped before an answer)."""

    default_retryable = True


class ServiceTimeoutError(ServiceError):
    """No answer, first token, or next chunk in time."""

    default_retryable = True


class ServiceAuthError(ServiceError):
    """The API key was refused (401) or lacks access (403)."""


class ServiceRateLimitError(ServiceError):
    """HTTP 429: too many requests or no quota left."""

    default_retryable = True


class ServiceHTTPError(ServiceError):
    """Any other HTTP error: 5xx (retryable) or 4xx (not)."""


class ServiceBadResponseError(ServiceError):
    """The answer could not be used: garbage, a malformed chunk, a stream cut short."""


# -- constructors with the standard wording -------------------------------------------------


def unreachable(service: str, detail: str = "connection failed") -> ServiceUnreachableError:
    """``detail`` (the low-level cause, often with an address) is kept for the log only."""
    return ServiceUnreachableError(
        service,
        f"{service_name(service)} could not be reached; check its base URL.",
        detail=detail,
    )


def timed_out(service: str, detail: str = "no answer in time") -> ServiceTimeoutError:
    return ServiceTimeoutError(service, f"{service_name(service)} timed out ({detail}).")


def bad_response(service: str, what: str, detail: str = "") -> ServiceBadResponseError:
    """``what``: our own words for what was wrong (shown); ``detail``: for the log only."""
    return ServiceBadResponseError(
        service, f"{service_name(service)} sent a bad response: {what}.", detail=detail
    )


def _upstream_body(exc: openai.APIStatusError) -> str:
    """The whole error body the provider sent, as text (for the log)."""
    body = exc.body
    if body is None:
        try:
            return exc.response.text
        except Exception:  # a streamed answer whose body was never read
            return ""
    if isinstance(body, str):
        return body
    return json.dumps(body, ensure_ascii=False, default=str)


def from_status(service: str, status: int, upstream: str = "") -> ServiceError:
    """The error for an HTTP error status. ``upstream``, what the provider said, goes to
    ``detail`` only: the status is all the client is told."""
    name = service_name(service)
    said = f"HTTP {status}"
    if status in (401, 403):
        what = "rejected the API key" if status == 401 else "denied access"
        return ServiceAuthError(
            service,
            f"{name} {what} ({said}). Check PARLEY_OPENAI_API_KEY.",
            status=status,
            detail=upstream,
        )
    if status == 429:
        return ServiceRateLimitError(
            service,
            f"{name} is rate limiting requests ({said}); try again shortly.",
            status=status,
            detail=upstream,
        )
    # 408 and 409 are worth another try too (OpenAI's own clients retry them).
    retryable = status >= 500 or status in (408, 409)
    return ServiceHTTPError(
        service, f"{name} failed ({said}).", retryable=retryable, status=status, detail=upstream
    )


def _root_cause(exc: BaseException) -> str:
    """A short description of the lowest-level cause (``ConnectError: ...``)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _log_detail(error: ServiceError, exc: BaseException) -> None:
    """Log what the endpoint or the connection said, which the client is not told."""
    if not error.detail:
        return
    detail = error.detail
    if len(detail) > MAX_LOGGED_DETAIL:
        detail = f"{detail[:MAX_LOGGED_DETAIL]}… ({len(detail) - MAX_LOGGED_DETAIL} more chars)"
    logger.warning("{}{} {}", error.message, _where(exc), detail)


def _where(exc: BaseException) -> str:
    """`` [POST https://…/chat/completions]`` when the exception knows its request."""
    try:
        request: Any = getattr(exc, "request", None)
        return f" [{request.method} {request.url}]"
    except Exception:  # none, or httpx's "the .request property has not been set"
        return ""


def map_error(exc: BaseException, service: str, *, mid_stream: bool = False) -> ServiceError:
    """The :class:`ServiceError` for an ``openai``, ``httpx2`` or JSON failure; what the
    endpoint said is logged here, once (a :class:`ServiceError` passes through as it is).

    ``mid_stream``: the answer had begun, so a dropped connection means a stream cut
    short (a bad response), not an unreachable service. Unknown errors map to a
    non-retryable bad response, so a caller never retries what it cannot classify.
    """
    if isinstance(exc, ServiceError):
        return exc
    error = _classify(exc, service, mid_stream)
    _log_detail(error, exc)
    return error


def _classify(exc: BaseException, service: str, mid_stream: bool) -> ServiceError:
    if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
        return timed_out(service, "the request timed out")
    if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
        if mid_stream:
            what = "the stream ended mid-way (connection lost)"
            return bad_response(service, what, _root_cause(exc))
        return unreachable(service, _root_cause(exc))
    if isinstance(exc, openai.APIStatusError):
        return from_status(service, exc.status_code, _upstream_body(exc))
    if isinstance(exc, openai.APIResponseValidationError):
        return bad_response(service, "the answer did not match the expected schema")
    if isinstance(exc, openai.APIError):
        # An error event inside a stream: the provider failed after answering 200.
        return ServiceHTTPError(
            service,
            f"{service_name(service)} reported an error in its answer.",
            retryable=True,
            detail=exc.message,
        )
    if isinstance(exc, json.JSONDecodeError):
        # ``msg`` is the parser's own wording ("Expecting value"), never the text parsed.
        return bad_response(service, f"a chunk was not valid JSON ({exc.msg})")
    return bad_response(service, f"an unexpected {type(exc).__name__}", _root_cause(exc))
