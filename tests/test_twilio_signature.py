"""Twilio's webhook signatures and our stream tokens (server/telephony/signature.py).

The signature vectors are Twilio's: its security page's example (auth token 12345) and the
cases of twilio-python's ``tests/unit/test_request_validator.py`` (ports, repeated names).
One test posts a real form over a socket to a server that sees a forwarded URL, as behind a
proxy, and checks it against the public one.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from server.telephony.signature import (
    SIGNATURE_HEADER,
    TokenError,
    check_token,
    is_valid_twilio_signature,
    issue_token,
    public_request_url,
    twilio_signature,
)
from testkit.thread_server import serve_in_thread

TOKEN = "12345"
URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
PARAMS = {
    "CallSid": "CA1234567890ABCDE",
    "Digits": "1234",
    "From": "+14158675309",
    "To": "+18005551212",
    "Caller": "+14158675309",
}
SIGNED = "RSOYDt4T1cUTdK1PDd93/VVr8B8="


def test_twilios_vectors() -> None:
    assert twilio_signature(TOKEN, URL, PARAMS) == SIGNED
    # The example of Twilio's security page (other phone numbers).
    older = dict(PARAMS, From="+12349013030", Caller="+12349013030")
    assert twilio_signature(TOKEN, URL, older) == "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    # Repeated names: sorted by name, then value, each pair counted once.
    repeated = [("Sid", "CA123"), ("SidAccount", "AC123"), ("Digits", "5678"),
                ("Digits", "1234"), ("Digits", "1234")]  # fmt: skip
    assert twilio_signature(TOKEN, URL, repeated) == "IK+Dwps556ElfBT0I3Rgjkr1wJU="
    assert is_valid_twilio_signature(TOKEN, URL, PARAMS, SIGNED)


@pytest.mark.parametrize(
    ("url", "signature"),
    [
        (URL.replace(".com", ".com:1234"), SIGNED),  # signed without the port
        (URL, "kvajT1Ptam85bY51eRf/AJRuM3w="),  # signed with :443
        (URL.replace("https", "http"), "0ZXoZLH/DfblKGATFgpif+LLRf4="),  # with :80
        (URL.replace(".com", ".com:1234").replace("https", "http"), "Zmvh+3yNM1Phv2jhDCwEM3q5ebU="),
    ],
)
def test_the_url_with_or_without_its_port(url: str, signature: str) -> None:
    assert is_valid_twilio_signature(TOKEN, url, PARAMS, signature)


@pytest.mark.parametrize(
    ("url", "params"),
    [
        (URL, dict(PARAMS, Digits="1235")),  # a value changed
        (URL, dict(PARAMS, Extra="1")),  # a parameter added
        (URL, {k: v for k, v in PARAMS.items() if k != "Digits"}),  # one left out
        (URL, dict(PARAMS, CallSid="CA1234567890ABCDE ")),  # whitespace counts
        (URL.replace("myapp", "other"), PARAMS),  # another path
        (URL.replace("foo=1", "foo=2"), PARAMS),  # another query
        (URL.replace("?foo=1&bar=2", ""), PARAMS),  # no query
        (URL.replace("https", "http"), PARAMS),  # another scheme
        (URL.replace("mycompany", "evil"), PARAMS),  # another host
    ],
)
def test_anything_altered_is_refused(url: str, params: dict[str, str]) -> None:
    assert not is_valid_twilio_signature(TOKEN, url, params, SIGNED)


@pytest.mark.parametrize(
    "signature", ["", "RSOYDt4T1cUTdK1PDd93/VVr8B8", "rsoydt4t1cutdk1pdd93/vvr8b8=", "é" * 28]
)
def test_bad_headers_are_refused_not_raised(signature: str) -> None:
    assert not is_valid_twilio_signature(TOKEN, URL, PARAMS, signature)
    assert not is_valid_twilio_signature("54321", URL, PARAMS, SIGNED)


def test_an_empty_auth_token_signs_nothing() -> None:
    for signature in (SIGNED, ""):
        with pytest.raises(ValueError, match="auth token"):
            is_valid_twilio_signature("", URL, PARAMS, signature)


def test_the_public_url_is_what_twilio_requested() -> None:
    base = "https://agent.example.com/prefix/"
    assert public_request_url(base, "/telephony/twilio") == (
        "https://agent.example.com/prefix/telephony/twilio"
    )
    assert public_request_url("https://a.example", "/v", "x=a%20b&y=1") == (
        "https://a.example/v?x=a%20b&y=1"
    )


# -- behind a proxy, over a real socket ----------------------------------------------------

PUBLIC = "https://agent.example.com/prefix"


async def webhook(request: Request) -> PlainTextResponse:
    # What a route does: the public URL, the path and raw query it got, every form pair.
    form = await request.form()
    url = public_request_url(PUBLIC, request.url.path, request.url.query)
    pairs = [(name, value) for name, value in form.multi_items() if isinstance(value, str)]
    valid = is_valid_twilio_signature(TOKEN, url, pairs, request.headers.get(SIGNATURE_HEADER, ""))
    return PlainTextResponse("ok" if valid else "forged", status_code=200 if valid else 403)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    app = Starlette(routes=[Route("/telephony/twilio", webhook, methods=["POST"])])
    with serve_in_thread(app) as url:
        yield url


def test_a_form_signed_for_the_public_url_passes_behind_a_proxy(server: str) -> None:
    form = {"CallSid": "CA" + "0" * 32, "SpeechResult": "yes + no & maybe é", "Digits": ""}
    query = "agent=support&name=Jane%20Doe"
    signature = twilio_signature(TOKEN, f"{PUBLIC}/telephony/twilio?{query}", form)
    with httpx.Client(base_url=server) as http:
        sent = http.post(f"/telephony/twilio?{query}", data=form,
                         headers={SIGNATURE_HEADER: signature})  # fmt: skip
        assert (sent.status_code, sent.text) == (200, "ok")
        forged = http.post(f"/telephony/twilio?{query}", data=dict(form, Digits="9"),
                           headers={SIGNATURE_HEADER: signature})  # fmt: skip
        assert forged.status_code == 403
        assert http.post("/telephony/twilio", data=form).status_code == 403


# -- stream tokens ------------------------------------------------------------------------

SECRET = "auth-token-0123456789"
CALL = "CA" + "a" * 32


def test_a_token_gives_back_its_call_until_it_expires() -> None:
    token = issue_token(SECRET, CALL, now=1000.0, ttl=60)
    assert check_token(SECRET, token, now=1000.0) == CALL
    assert check_token(SECRET, token, now=1059.999) == CALL
    with pytest.raises(TokenError, match="expired") as caught:
        check_token(SECRET, token, now=1060.0)
    assert caught.value.reason == "expired" and isinstance(caught.value, ValueError)


def test_a_token_is_url_safe_and_carries_any_call_id() -> None:
    token = issue_token(SECRET, CALL, now=time.time(), ttl=60)
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", token) and quote(token, safe="") == token
    odd = "call/é.1=2"
    assert check_token(SECRET, issue_token(SECRET, odd, 0.0, 5), 1.0) == odd


def test_another_secret_or_an_altered_token_is_refused() -> None:
    token = issue_token(SECRET, CALL, now=1000.0, ttl=60)
    call, expires, mac = token.split(".")
    other_call = issue_token(SECRET, "CA" + "b" * 32, now=1000.0, ttl=60).split(".")[0]
    altered = [
        f"{other_call}.{expires}.{mac}",  # another call's id under this signature
        f"{call}.{int(expires) + 3_600_000}.{mac}",  # a later expiry
        f"{call}.{expires}.{mac[:-1]}{'A' if mac[-1] != 'A' else 'B'}",
    ]
    for bad in altered:
        with pytest.raises(TokenError, match="bad signature"):
            check_token(SECRET, bad, now=1000.0)
    with pytest.raises(TokenError, match="bad signature"):
        check_token("another-secret", token, now=1000.0)
    # A forgery is a bad signature even when its expiry has passed.
    with pytest.raises(TokenError, match="bad signature"):
        check_token("another-secret", token, now=9999.0)


@pytest.mark.parametrize(
    "token",
    ["", "abc", "a.b.c", "a.1", "a.1.b.c", "Q0E.12x.", "Q0E.1." + "A" * 42 + "=",
     "Q0E.1." + "é" * 43, "Q0E.1." + "A" * 44, "A" * 200 + ".1." + "A" * 43,
     "Q0E.1." + "A" * 43 + "\n"],
)  # fmt: skip
def test_malformed_tokens_are_refused(token: str) -> None:
    with pytest.raises(TokenError, match="malformed") as caught:
        check_token(SECRET, token, now=0.0)
    assert caught.value.reason == "malformed"


def test_tokens_need_a_secret_a_call_and_a_lifetime() -> None:
    with pytest.raises(ValueError, match="secret"):
        issue_token("", CALL, 0.0, 60)
    with pytest.raises(ValueError, match="secret"):
        check_token("", issue_token(SECRET, CALL, 0.0, 60), 0.0)
    with pytest.raises(ValueError, match="finite"):  # NaN compares false: it never expires
        check_token(SECRET, issue_token(SECRET, CALL, 0.0, 60), float("nan"))
    for call, ttl in [("", 60.0), ("x" * 129, 60.0), (CALL, 0.0), (CALL, float("inf"))]:
        with pytest.raises(ValueError):
            issue_token(SECRET, call, 0.0, ttl)
