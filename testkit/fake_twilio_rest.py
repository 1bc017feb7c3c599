"""A fake of Twilio's REST API on 127.0.0.1, as far as Parley calls it: updating a call
to ``Status=completed`` (the hang-up), with Twilio's basic auth and its JSON errors.
Served by uvicorn in a thread, so a server in another process can reach it."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from testkit.thread_server import serve_in_thread

CALL_PATH = "/2010-04-01/Accounts/{account}/Calls/{call}.json"


@dataclass
class FakeTwilioRest:
    """The fake's address and what it was asked to do (call SIDs hung up, in order)."""

    account_sid: str
    auth_token: str
    url: str = ""
    hung_up: list[str] = field(default_factory=list)
    refused: int = 0

    def app(self) -> Starlette:
        async def update_call(request: Request) -> Response:
            account, call = request.path_params["account"], request.path_params["call"]
            login = base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode()
            if account != self.account_sid or request.headers.get("authorization") != (
                "Basic " + login
            ):
                self.refused += 1
                return _error(401, 20003, "Authenticate")
            form = dict(await request.form())
            if form.get("Status") != "completed":
                self.refused += 1
                return _error(400, 21218, f"Invalid form {form}")
            self.hung_up.append(call)
            return JSONResponse({"sid": call, "account_sid": account, "status": "completed"})

        return Starlette(routes=[Route(CALL_PATH, update_call, methods=["POST"])])


def _error(status: int, code: int, message: str) -> JSONResponse:
    body = {"code": code, "message": message, "status": status,
            "more_info": f"https://www.twilio.com/docs/errors/{code}"}  # fmt: skip
    return JSONResponse(body, status_code=status)


@contextmanager
def fake_twilio_rest(account_sid: str, auth_token: str) -> Iterator[FakeTwilioRest]:
    """The fake, serving until the block ends."""
    fake = FakeTwilioRest(account_sid, auth_token)
    with serve_in_thread(fake.app(), "the fake Twilio REST API") as url:
        fake.url = url
        yield fake
