"""Log output (server/ops/logs.py): credentials in a URL's query never reach uvicorn's
lines, whatever their case or encoding."""

from __future__ import annotations

import logging

import pytest

from server.ops.logs import RedactSecrets, redact, redact_uvicorn_logs


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('1.2.3.4:5 - "WebSocket /ws?api_key=k2-secret" [accepted]',
         '1.2.3.4:5 - "WebSocket /ws?api_key=[redacted]" [accepted]'),
        ("GET /telephony/ws?provider=twilio&token=abc.1.def&x=1 HTTP/1.1",
         "GET /telephony/ws?provider=twilio&token=[redacted]&x=1 HTTP/1.1"),
        ("/ws?api%5Fkey=secret&API_KEY=other", "/ws?api%5Fkey=[redacted]&API_KEY=[redacted]"),
        ("/ws?tokens=kept&monkey=kept", "/ws?tokens=kept&monkey=kept"),
        ("nothing to hide", "nothing to hide"),
    ],
)  # fmt: skip
def test_credentials_in_a_query_are_redacted(line: str, expected: str) -> None:
    assert redact(line) == expected


def test_uvicorns_loggers_redact_their_arguments(caplog: pytest.LogCaptureFixture) -> None:
    redact_uvicorn_logs()
    redact_uvicorn_logs()  # twice: one filter
    log = logging.getLogger("uvicorn.error")
    assert sum(isinstance(f, RedactSecrets) for f in log.filters) == 1
    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        log.info('%s - "WebSocket %s" [accepted]', "127.0.0.1:1", "/ws?api_key=k-secret")
    assert "k-secret" not in caplog.text and "api_key=[redacted]" in caplog.text
