"""The one Twilio REST call the agent makes: hanging up a call.

Closing a ``<Connect><Stream>`` WebSocket only moves Twilio on to the next TwiML; ending
the call outright is an update of the Call resource, ``Status=completed``
(https://www.twilio.com/docs/voice/api/call-resource#update-a-call-resource):
``POST /2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json``, form-encoded, HTTP basic
auth with the account SID and auth token.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

TIMEOUT = 5.0  # seconds for the whole request: a hang-up must not hold a call's close
_ACCOUNT_SID = re.compile(r"AC[0-9a-fA-F]{32}")
_CALL_SID = re.compile(r"CA[0-9a-fA-F]{32}")
_MAX_MESSAGE = 500  # characters of Twilio's message kept in the error (and so in logs)


class TwilioRestError(Exception):
    """Twilio refused a request, or could not be reached (``status`` 0).

    ``code`` is Twilio's error code (https://www.twilio.com/docs/api/errors) when it sent
    one, e.g. 20404 for a call it does not know."""

    def __init__(self, status: int, message: str, code: int | None = None) -> None:
        super().__init__(f"Twilio REST {status or 'unreachable'}: {message}")
        self.status, self.message, self.code = status, message, code


class TwilioRest:
    """Twilio's REST API for one account. Pass an ``httpx.AsyncClient`` to share one (it
    is then left open); otherwise one is made and :meth:`aclose` closes it."""

    def __init__(
        self,
        account_sid: str,
        auth_token: str,
        api_url: str = "https://api.twilio.com",
        client: httpx.AsyncClient | None = None,
        timeout: float = TIMEOUT,
    ) -> None:
        if not _ACCOUNT_SID.fullmatch(account_sid) or not auth_token:
            raise ValueError("Twilio REST needs an account SID (AC + 32 hex) and an auth token")
        self._base = f"{api_url.rstrip('/')}/2010-04-01/Accounts/{account_sid}"
        self._auth = httpx.BasicAuth(account_sid, auth_token)
        self._timeout = httpx.Timeout(timeout)
        self._owned = client is None
        self._client = client or httpx.AsyncClient()

    async def hang_up(self, call_sid: str) -> None:
        """End the call now (``Status=completed``); :class:`TwilioRestError` if refused."""
        # Checked, not escaped: the SID becomes part of the request path.
        if not _CALL_SID.fullmatch(call_sid):
            raise ValueError(f"not a Twilio call SID (CA + 32 hex): {call_sid!r}")
        url = f"{self._base}/Calls/{call_sid}.json"
        try:
            response = await self._client.post(
                url,
                data={"Status": "completed"},
                auth=self._auth,
                headers={"Accept": "application/json"},
                timeout=self._timeout,
                follow_redirects=False,
            )
        except httpx.HTTPError as exc:
            raise TwilioRestError(0, f"{type(exc).__name__}: {exc}") from exc
        if not response.is_success:
            raise _error(response)

    async def aclose(self) -> None:
        """Close the HTTP client, if this object made it."""
        if self._owned:
            await self._client.aclose()


def _error(response: httpx.Response) -> TwilioRestError:
    """Twilio's JSON error (``message``, or RFC 9457's ``detail``/``title``) as an error."""
    body: Any
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return TwilioRestError(response.status_code, response.reason_phrase or "no JSON body")
    message = body.get("message") or body.get("detail") or body.get("title")
    code = body.get("code")
    return TwilioRestError(
        response.status_code,
        str(message or response.reason_phrase)[:_MAX_MESSAGE],
        code if isinstance(code, int) and not isinstance(code, bool) else None,
    )
