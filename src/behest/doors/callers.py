"""Who an HTTP door's request is: its `Authorization: Bearer` header, checked by the gRPC
side's own Authenticator (api/auth.py), so tokens, JWTs and tenants are the same on every door.
"""

from __future__ import annotations

from collections.abc import Iterable

from behest.api.auth import Authenticator
from behest.domain.callers import Caller
from behest.errors import Unauthenticated


def caller_of(authenticator: Authenticator, headers: Iterable[tuple[str, str]]) -> Caller:
    """The caller the request's headers name; Unauthenticated in plain words otherwise.

    (`[auth] mode = "mtls"` refuses `http_listen` at start: the HTTP listener asks for no
    client certificates, so client certificates are the gRPC port's alone.)"""
    metadata = [(name.lower(), value) for name, value in headers if name.lower() == "authorization"]
    try:
        return authenticator.from_metadata(metadata)
    except Unauthenticated as exc:
        raise Unauthenticated(str(exc).replace("metadata", "header")) from None
