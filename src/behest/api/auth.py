"""Who is calling: one server interceptor authenticates every RPC before any handler work.

Modes (`[auth] mode`): `none` — every caller is the default tenant's (the server refuses to
listen off loopback like that unless `allow_insecure`); `bearer` — `authorization: Bearer
<token>`, a token whose SHA-256 is configured (`[auth.tokens.NAME]`) or a JWT verified with
PyJWT against a public key or JWKS file (`[auth.jwt]`: issuer, audience, expiry, the tenant
from a claim); `mtls` — the client certificate TLS verified against `[tls] client_ca_file`
names the principal (its CN, else its first SAN) and the tenant (a subject attribute).

Health checks and reflection pass without credentials unless `protect_health`. A caller that
fails gets UNAUTHENTICATED with a plain message that never echoes what it sent; the handler
never runs. Handlers read the caller with `current_caller()`.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import jwt
from cryptography import x509
from cryptography.x509.oid import NameOID

from behest.config import AuthSettings, JwtConfig, TlsSettings
from behest.domain.callers import ANONYMOUS, Caller
from behest.errors import Unauthenticated

log = logging.getLogger(__name__)

# Services anyone may call unless `protect_health`: health checks and reflection.
OPEN_SERVICES = (
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
)
_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("caller", default=None)
_BEARER = "bearer "
_ATTRIBUTES = {
    "O": NameOID.ORGANIZATION_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "CN": NameOID.COMMON_NAME,
    "L": NameOID.LOCALITY_NAME,
    "ST": NameOID.STATE_OR_PROVINCE_NAME,
    "C": NameOID.COUNTRY_NAME,
}


def current_caller() -> Caller:
    """The authenticated caller of the RPC being handled."""
    caller = _CALLER.get()
    if caller is None:
        raise RuntimeError("no caller: the RPC did not pass the authentication interceptor")
    return caller


def act_as(caller: Caller) -> None:
    """Make `caller` the current caller of the task handling a call (an HTTP door's request,
    authenticated by the door from its headers as the interceptor does from metadata)."""
    _CALLER.set(caller)


class Authenticator:
    """Checks one call's credentials against the settings; raises Unauthenticated."""

    def __init__(self, auth: AuthSettings, tls: TlsSettings) -> None:
        self.mode = auth.mode
        self._tokens = {
            bytes.fromhex(t.sha256): Caller(t.principal, t.tenant, frozenset(t.roles))
            for t in auth.tokens.values()
        }
        self._jwt = _JwtVerifier(auth.jwt) if auth.jwt is not None else None
        self._tenant_attribute = _ATTRIBUTES[tls.tenant_attribute]

    def from_metadata(self, metadata: Sequence[tuple[str, str | bytes]]) -> Caller:
        """The caller a call's metadata names (mode none: the default tenant's)."""
        if self.mode == "none":
            return ANONYMOUS
        sent = [v for k, v in metadata if k == "authorization"]
        if not sent:
            raise Unauthenticated(
                "missing credentials: send the metadata 'authorization: Bearer <token>'"
            )
        value = sent[0] if isinstance(sent[0], str) else ""
        if len(sent) > 1 or not value[: len(_BEARER)].lower() == _BEARER:
            raise Unauthenticated("the authorization metadata must be one 'Bearer <token>'")
        token = value[len(_BEARER) :].strip()
        # A lookup by the token's SHA-256: what its timing could tell is about hashes.
        caller = self._tokens.get(hashlib.sha256(token.encode()).digest())
        if caller is not None:
            return caller
        if self._jwt is not None and token.count(".") == 2:
            return self._jwt.caller(token)
        raise Unauthenticated("invalid token: it is not one this server accepts")

    def from_certificate(self, auth_context: dict[str, list[bytes]]) -> Caller:
        """The caller a verified TLS client certificate names."""
        pems = auth_context.get("x509_pem_cert") or []
        if not pems:
            raise Unauthenticated("a client certificate is required")
        certificate = x509.load_pem_x509_certificate(pems[0])
        subject = certificate.subject
        tenant = _attribute(subject, self._tenant_attribute)
        principal = _attribute(subject, NameOID.COMMON_NAME) or _first_san(certificate)
        if not tenant or not principal:
            raise Unauthenticated(
                "the client certificate names no tenant or no principal (its subject needs "
                "the configured tenant attribute, and a CN or a SAN)"
            )
        return Caller(principal, tenant)


class _JwtVerifier:
    """JWTs signed by a configured key (a PEM public key, or the keys of a JWKS file)."""

    def __init__(self, config: JwtConfig) -> None:
        self._config = config
        self._key: Any = None
        self._jwks: jwt.PyJWKSet | None = None
        if config.jwks_file:
            self._jwks = jwt.PyJWKSet.from_json(Path(config.jwks_file).read_text())
        elif config.public_key_file:
            self._key = Path(config.public_key_file).read_bytes()
        else:
            raise ValueError("[auth.jwt] needs public_key_file or jwks_file")

    def caller(self, token: str) -> Caller:
        config = self._config
        try:
            key = self._key if self._jwks is None else self._jwks_key(token)
            claims = jwt.decode(
                token,
                key=key,
                algorithms=list(config.algorithms),
                audience=config.audience or None,
                issuer=config.issuer or None,
                leeway=config.leeway_s,
                options={"require": ["exp"], "verify_aud": bool(config.audience)},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("the token has expired") from None
        except jwt.InvalidTokenError as exc:
            log.info("a JWT was refused: %s", type(exc).__name__)
            raise Unauthenticated("invalid token: it is not one this server accepts") from None
        principal, tenant = claims.get(config.principal_claim), claims.get(config.tenant_claim)
        if not isinstance(principal, str) or not isinstance(tenant, str) or not tenant:
            raise Unauthenticated(
                f"the token names no tenant (claim {config.tenant_claim!r}) or no principal "
                f"(claim {config.principal_claim!r})"
            )
        return Caller(principal, tenant, _roles(claims.get(config.roles_claim)))

    def _jwks_key(self, token: str) -> Any:
        assert self._jwks is not None
        kid = jwt.get_unverified_header(token).get("kid")
        for key in self._jwks.keys:
            if kid is None or key.key_id == kid:
                return key.key
        raise jwt.InvalidKeyError("no key of the JWKS file has the token's kid")


def _roles(claim: Any) -> frozenset[str]:
    """A JWT's roles: a list of strings or one space-separated string (as OAuth scopes)."""
    if isinstance(claim, str):
        return frozenset(claim.split())
    if isinstance(claim, list):
        return frozenset(r for r in claim[:100] if isinstance(r, str))
    return frozenset()


def _attribute(name: x509.Name, oid: x509.ObjectIdentifier) -> str:
    values = name.get_attributes_for_oid(oid)
    value = values[0].value if values else ""
    return value if isinstance(value, str) else value.decode(errors="replace")


def _first_san(certificate: x509.Certificate) -> str:
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return ""
    for general in names.value:
        if isinstance(general, x509.DNSName | x509.UniformResourceIdentifier):
            return str(general.value)
    return ""


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates each call before its handler: the caller, or UNAUTHENTICATED.

    Tokens are checked here, from the call's metadata, and the caller set for the call's task
    (grpc.aio runs the interceptor and the handler in one task): no wrapper around handlers.
    A client certificate is only in the handler's context, so mTLS wraps the handler instead.
    """

    def __init__(self, authenticator: Authenticator, *, protect_health: bool) -> None:
        self._authenticator = authenticator
        self._open = () if protect_health else OPEN_SERVICES

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        service = handler_call_details.method.lstrip("/").partition("/")[0]
        if service in self._open:
            return handler
        authenticator = self._authenticator
        if authenticator.mode == "mtls":
            return _wrapped(handler, self._from_certificate)
        try:
            caller = authenticator.from_metadata(handler_call_details.invocation_metadata or ())
        except Unauthenticated as exc:
            return _wrapped(handler, functools.partial(_refuse, str(exc)))
        _CALLER.set(caller)
        return handler

    async def _from_certificate(self, context: grpc.aio.ServicerContext) -> None:
        try:
            caller = self._authenticator.from_certificate(context.auth_context())
        except Unauthenticated as exc:
            await _refuse(str(exc), context)
        _CALLER.set(caller)


async def _refuse(message: str, context: grpc.aio.ServicerContext) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)


def _wrapped(handler: Any, first: Callable[[grpc.aio.ServicerContext], Awaitable[None]]) -> Any:
    """The handler, its behaviour run only once `first(context)` returned (it may abort)."""
    if handler.unary_unary is not None:
        behaviour = handler.unary_unary

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await first(context)
            return await behaviour(request, context)

        return handler._replace(unary_unary=unary_unary)
    if handler.unary_stream is not None:
        streaming = handler.unary_stream

        async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await first(context)
            async for item in streaming(request, context):
                yield item

        return handler._replace(unary_stream=unary_stream)
    if handler.stream_unary is not None:
        consuming = handler.stream_unary

        async def stream_unary(requests: AsyncIterator[Any], context: Any) -> Any:
            await first(context)
            return await consuming(requests, context)

        return handler._replace(stream_unary=stream_unary)
    both = handler.stream_stream

    async def stream_stream(requests: AsyncIterator[Any], context: Any) -> Any:
        await first(context)
        async for item in both(requests, context):
            yield item

    return handler._replace(stream_stream=stream_stream)


def metrics_guard(
    authenticator: Authenticator, role: str
) -> Callable[[str], tuple[int, str] | None] | None:
    """Who may scrape /metrics (metrics_endpoint.py): with bearer tokens, a caller with `role`
    (any caller when empty); None for modes none (open) and mtls (TLS checks certificates)."""
    if authenticator.mode != "bearer":
        return None

    def check(header: str) -> tuple[int, str] | None:
        try:
            caller = authenticator.from_metadata([("authorization", header)] if header else [])
        except Unauthenticated as exc:
            return 401, str(exc).replace("metadata", "header")
        if role and role not in caller.roles:
            return 403, f"scraping metrics needs a token with the role {role!r}"
        return None

    return check
