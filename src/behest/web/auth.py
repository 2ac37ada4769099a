"""Sign-in: a bearer token, checked exactly as the gRPC side checks it, kept in a cookie.

The cookie (`behest_session`: Secure, HttpOnly, SameSite=Strict) holds a random nonce and the
token; every request hands the token to api/auth.py's `Authenticator.from_metadata`, so a
revoked token, an expired JWT and the caller's tenant are the gRPC side's. Every POST carries
a CSRF token, the HMAC of the cookie under a per-process secret, in a hidden field; the
sign-in form's is the HMAC of a nonce in its own short-lived cookie.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import re
import secrets

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from behest.api.auth import Authenticator
from behest.domain.callers import Caller
from behest.errors import Unauthenticated

COOKIE = "behest_session"
SIGNIN_COOKIE = "behest_signin"
CSRF_FIELD = "csrf"
# Sign-ins signed out lately (their nonces), refused should their cookie come back.
REMEMBERED_SIGN_OUTS = 100_000
# Tokens travel in a cookie: the characters a cookie value holds unquoted.
_COOKIE_SAFE = re.compile(r"^[A-Za-z0-9!#$%&'*+\-.^_`|~:]{1,4000}$")


class SignInRequired(Exception):
    """The request has no valid sign-in: pages send the browser to /signin."""


class CsrfRefused(Exception):
    """A POST without the CSRF token of its sign-in: 403."""


class Gate:
    """Who a request is (from its cookie), sign-in and sign-out, CSRF tokens."""

    def __init__(self, authenticator: Authenticator) -> None:
        self._authenticator = authenticator
        self._secret = secrets.token_bytes(32)
        self._signed_out: collections.OrderedDict[str, None] = collections.OrderedDict()

    @property
    def needs_token(self) -> bool:
        return self._authenticator.mode != "none"

    def caller(self, request: Request) -> Caller:
        """The signed-in caller; SignInRequired when there is none (or its token went bad)."""
        value = request.cookies.get(COOKIE, "")
        nonce, dot, token = value.partition(".")
        if not nonce or not dot or nonce in self._signed_out:
            raise SignInRequired
        try:
            return self._check(token)
        except Unauthenticated:
            raise SignInRequired from None

    def sign_in(self, token: str, response: Response) -> Caller:
        """Check the token; set the session cookie. Raises Unauthenticated."""
        token = token.strip()
        if token and not _COOKIE_SAFE.match(token):
            raise Unauthenticated("invalid token: it is not one this server accepts")
        caller = self._check(token)
        value = f"{secrets.token_urlsafe(18)}.{token}"
        _set_cookie(response, COOKIE, value, max_age=None)
        response.delete_cookie(
            SIGNIN_COOKIE, path="/", secure=True, httponly=True, samesite="strict"
        )
        return caller

    def sign_out(self, request: Request, response: Response) -> None:
        """Clear the cookie, and refuse it from now on should it come back."""
        nonce = request.cookies.get(COOKIE, "").partition(".")[0]
        if nonce:
            self._signed_out[nonce] = None
            if len(self._signed_out) > REMEMBERED_SIGN_OUTS:
                self._signed_out.popitem(last=False)
        response.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="strict")

    def csrf_token(self, request: Request) -> str:
        """The CSRF token for the forms of this request's sign-in ("" when signed out)."""
        value = request.cookies.get(COOKIE, "")
        return self._mac("session", value) if value else ""

    def sign_in_nonce(self) -> tuple[str, str]:
        """A fresh sign-in nonce (for its cookie) and the sign-in form's CSRF token for it."""
        nonce = secrets.token_urlsafe(18)
        return nonce, self._mac("signin", nonce)

    def keep_sign_in_nonce(self, response: Response, nonce: str) -> None:
        _set_cookie(response, SIGNIN_COOKIE, nonce, max_age=600)

    async def checked_form(self, request: Request, *, signing_in: bool = False) -> FormData:
        """The POSTed form, once its CSRF token matches the sign-in's; CsrfRefused otherwise."""
        form = await request.form()
        sent = form.get(CSRF_FIELD)
        name, purpose = (SIGNIN_COOKIE, "signin") if signing_in else (COOKIE, "session")
        value = request.cookies.get(name, "")
        expected = self._mac(purpose, value) if value else ""
        if not isinstance(sent, str) or not expected or not hmac.compare_digest(sent, expected):
            raise CsrfRefused
        return form

    def _check(self, token: str) -> Caller:
        metadata = [("authorization", f"Bearer {token}")] if token else []
        return self._authenticator.from_metadata(metadata)

    def _mac(self, purpose: str, value: str) -> str:
        message = f"{purpose}:{value}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()


def _set_cookie(response: Response, name: str, value: str, *, max_age: int | None) -> None:
    # Secure even over plain HTTP on loopback: browsers treat 127.0.0.1 and localhost as
    # secure origins and keep the cookie (docs/INSPECTOR.md).
    response.set_cookie(
        name, value, max_age=max_age, path="/", secure=True, httponly=True, samesite="strict"
    )
