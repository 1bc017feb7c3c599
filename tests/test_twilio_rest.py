"""Hanging up through Twilio's REST API (server/telephony/twilio_rest.py), against a small
fake of it on 127.0.0.1: uvicorn serving a Starlette app in a thread, which checks the basic
auth and the form as Twilio would, records the hang-ups, and answers errors as Twilio does
(JSON with ``code`` and ``message``)."""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from server.telephony.twilio_rest import TwilioRest, TwilioRestError
from testkit.thread_server import serve_in_thread

ACCOUNT = "AC" + "0123456789abcdef" * 2
TOKEN = "auth-token-secret"
CALL = "CA" + "f" * 32
UNKNOWN = "CA" + "e" * 32
BROKEN = "CA" + "d" * 32  # the fake fails on it without JSON
SLOW = "CA" + "c" * 32  # the fake answers it after 2 s
ENDED = "CA" + "b" * 32  # the fake refuses it in RFC 9457's shape (Twilio's newer APIs)


@dataclass
class FakeTwilio:
    url: str = ""
    hang_ups: list[dict[str, object]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _twilio_error(status: int, code: int, message: str) -> JSONResponse:
    more = f"https://www.twilio.com/docs/errors/{code}"
    body = {"code": code, "message": message, "more_info": more, "status": status}
    return JSONResponse(body, status_code=status)


def _app(fake: FakeTwilio) -> Starlette:
    async def update_call(request: Request) -> Response:
        account, call = request.path_params["account"], request.path_params["call"]
        expected = "Basic " + base64.b64encode(f"{ACCOUNT}:{TOKEN}".encode()).decode()
        if account != ACCOUNT or request.headers.get("authorization") != expected:
            return _twilio_error(401, 20003, "Authenticate")
        if request.headers.get("content-type") != "application/x-www-form-urlencoded":
            return _twilio_error(400, 20001, "Expected a form")
        form = dict(await request.form())
        if call == BROKEN:
            return PlainTextResponse("upstream fell over", status_code=502)
        if call == ENDED:
            problem = {"type": "https://www.twilio.com/docs/errors/21220", "status": 400,
                       "title": "Invalid call state", "code": 21220,
                       "detail": "The call has already ended"}  # fmt: skip
            return JSONResponse(problem, status_code=400)
        if call == SLOW:
            await asyncio.sleep(2)
        if call != CALL:
            return _twilio_error(404, 20404, f"The requested resource {request.url.path} was "
                                 "not found")  # fmt: skip
        if form != {"Status": "completed"}:
            return _twilio_error(400, 21218, f"Invalid form {form}")
        with fake.lock:
            fake.hang_ups.append({"call": call, "form": form})
        return JSONResponse({"sid": call, "account_sid": account, "status": "completed"})

    path = "/2010-04-01/Accounts/{account}/Calls/{call}.json"
    return Starlette(routes=[Route(path, update_call, methods=["POST"])])


@pytest.fixture(scope="module")
def twilio() -> Iterator[FakeTwilio]:
    fake = FakeTwilio()
    with serve_in_thread(_app(fake), "the fake Twilio REST API") as url:
        fake.url = url
        yield fake


@pytest.fixture
def fake(twilio: FakeTwilio) -> FakeTwilio:
    with twilio.lock:
        twilio.hang_ups.clear()
    return twilio


async def test_hang_up_completes_the_call(fake: FakeTwilio) -> None:
    rest = TwilioRest(ACCOUNT, TOKEN, fake.url + "/")  # a trailing slash is fine
    try:
        await rest.hang_up(CALL)
    finally:
        await rest.aclose()
    assert fake.hang_ups == [{"call": CALL, "form": {"Status": "completed"}}]


async def test_twilios_refusals_are_typed_errors_with_its_message(fake: FakeTwilio) -> None:
    async with httpx.AsyncClient() as client:
        wrong = TwilioRest(ACCOUNT, "not-the-token", fake.url, client)
        with pytest.raises(TwilioRestError, match="401: Authenticate") as caught:
            await wrong.hang_up(CALL)
        assert (caught.value.status, caught.value.code) == (401, 20003)
        rest = TwilioRest(ACCOUNT, TOKEN, fake.url, client)
        with pytest.raises(TwilioRestError, match="was not found") as caught:
            await rest.hang_up(UNKNOWN)
        assert (caught.value.status, caught.value.code) == (404, 20404)
        with pytest.raises(TwilioRestError, match="502: Bad Gateway") as caught:
            await rest.hang_up(BROKEN)
        assert caught.value.code is None
        with pytest.raises(TwilioRestError, match="400: The call has already ended") as caught:
            await rest.hang_up(ENDED)
        assert caught.value.code == 21220
        await rest.aclose()  # a client passed in is the caller's to close
        assert not client.is_closed
    assert fake.hang_ups == []


async def test_a_slow_or_absent_api_is_an_error_in_bounded_time(fake: FakeTwilio) -> None:
    rest = TwilioRest(ACCOUNT, TOKEN, fake.url, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(TwilioRestError, match="unreachable") as caught:
        await rest.hang_up(SLOW)
    assert caught.value.status == 0 and time.monotonic() - started < 1.5
    await rest.aclose()
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{closed.getsockname()[1]}"
    rest = TwilioRest(ACCOUNT, TOKEN, nowhere)
    with pytest.raises(TwilioRestError, match="ConnectError"):
        await rest.hang_up(CALL)
    await rest.aclose()


async def test_sids_that_would_bend_the_path_are_refused_unsent(fake: FakeTwilio) -> None:
    rest = TwilioRest(ACCOUNT, TOKEN, fake.url)
    for sid in ["../../Accounts/x", CALL + "/Recordings", "", CALL.lower().replace("ca", "xx")]:
        with pytest.raises(ValueError, match="call SID"):
            await rest.hang_up(sid)
    await rest.aclose()
    for account, token in [("AC123", TOKEN), (ACCOUNT, ""), (ACCOUNT + "/x", TOKEN)]:
        with pytest.raises(ValueError, match="account SID"):
            TwilioRest(account, token, fake.url)
    assert fake.hang_ups == []
