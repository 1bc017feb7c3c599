"""Refusals with ``Retry-After``: whole seconds, rounded up, on the response."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from server.api.retry_after import retry_later, unavailable
from server.settings import Settings


def test_seconds_are_rounded_up_to_whole_ones() -> None:
    assert retry_later(429, "slow down", 0.2).headers == {"Retry-After": "1"}
    assert retry_later(429, "slow down", 4.0).headers == {"Retry-After": "4"}
    assert retry_later(429, "slow down", 4.01).headers == {"Retry-After": "5"}


def test_a_full_server_answers_503_after_the_configured_seconds() -> None:
    app = FastAPI()

    @app.post("/start")
    def start() -> None:
        raise unavailable("the server is full (2 sessions)", Settings(retry_after=7))

    response = TestClient(app).post("/start")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "7"
    assert response.json() == {"detail": "the server is full (2 sessions)"}
