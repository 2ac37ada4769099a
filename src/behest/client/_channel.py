"""How the client reaches the server: TLS credentials from PEM files, the bearer token's
metadata, and the backoff between attempts of a call that may be retried."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import grpc

from behest.backoff import backoff_s

FilePath = str | os.PathLike[str]
# What a bearer token may hold: visible ASCII (gRPC refuses other header bytes).
_TOKEN_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F))


def authorization(token: str) -> tuple[tuple[str, str], ...]:
    """The metadata that carries `token`, or none without one."""
    token = token.strip()
    if not token:
        return ()
    if not set(token) <= _TOKEN_CHARS:
        # Never echo the token: say what is wrong with it, not what it is.
        raise ValueError("the token must be visible ASCII characters, without spaces")
    return (("authorization", f"Bearer {token}"),)


def credentials(
    ca: FilePath | None, cert: FilePath | None, key: FilePath | None
) -> grpc.ChannelCredentials | None:
    """TLS credentials from PEM files; None (plaintext) when no CA or certificate is given."""
    if bool(cert) != bool(key):
        raise ValueError("a client certificate and its key go together (tls_cert and tls_key)")
    if not ca and not cert:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read(ca, "TLS CA") if ca else None,
        private_key=_read(key, "TLS key") if key else None,
        certificate_chain=_read(cert, "TLS certificate") if cert else None,
    )


def _read(path: FilePath, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise OSError(f"cannot read the {what} file {os.fspath(path)}: {exc.strerror}") from None


class Backoff:
    """Bounded exponential backoff for one outage: `attempts` waits, then give up."""

    def __init__(self, attempts: int, base_s: float, max_s: float) -> None:
        self.attempts = attempts
        self._base_s = base_s
        self._max_s = max_s

    async def wait(self, attempt: int) -> bool:
        """Wait before attempt `attempt + 1`; False (no wait) once the attempts are used up."""
        if attempt >= self.attempts:
            return False
        # behest's one backoff (full jitter): many clients of a restarted server spread out.
        await asyncio.sleep(backoff_s(attempt + 1, initial_s=self._base_s, max_s=self._max_s))
        return True
