"""Stream tickets (domain/tickets.py): minted for one of a caller's runs, redeemed for that
caller by the HTTP door's server-sent events (doors/sse.py) instead of an Authorization header.

A ticket is `bst_` and 32 random bytes (URL-safe base64). Only its SHA-256 is stored, with the
tenant, principal, run and expiry, so a database dump or a log holds nothing that opens a
stream, and a ticket minted on one replica works on every replica of the database. It may be
used again until it expires (EventSource reconnects with the same URL).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from behest.domain.callers import Caller
from behest.domain.tickets import MintedTicket, StreamTicket
from behest.errors import Unauthenticated, quote
from behest.store.base import Store

PREFIX = "bst_"
TICKET_BYTES = 32
# What a ticket looks like: anything else is refused before it is hashed or looked up.
_SHAPE = re.compile(r"^bst_[A-Za-z0-9_-]{43}$")


def digest_of(ticket: str) -> str:
    """The SHA-256 of a ticket, as stored."""
    return hashlib.sha256(ticket.encode()).hexdigest()


def _utc_now() -> datetime:
    return datetime.now(UTC)


class StreamTickets:
    """Mints tickets that last `ttl_s`, and tells whose a ticket presented for a run is."""

    def __init__(
        self, store: Store, *, ttl_s: float, clock: Callable[[], datetime] = _utc_now
    ) -> None:
        self._store = store
        self._ttl = timedelta(seconds=ttl_s)
        self._clock = clock

    async def mint(self, caller: Caller, run_id: str) -> MintedTicket:
        """A new ticket for `run_id`, which the caller may read (checked by Operations)."""
        ticket = PREFIX + secrets.token_urlsafe(TICKET_BYTES)
        now = self._clock()
        stored = StreamTicket(
            digest=digest_of(ticket),
            run_id=run_id,
            tenant=caller.tenant,
            principal=caller.principal,
            created_at=now,
            expires_at=now + self._ttl,
        )
        await self._store.add_stream_ticket(stored, now=now)
        return MintedTicket(ticket, stored.expires_at)

    async def caller(self, ticket: str, run_id: str) -> Caller:
        """The caller that minted `ticket` for `run_id`; Unauthenticated if it is not one,
        has expired, or was minted for another run."""
        if not _SHAPE.match(ticket):
            raise Unauthenticated("the stream ticket is not one this server issues")
        stored = await self._store.stream_ticket(digest_of(ticket))
        if stored is None:
            raise Unauthenticated("the stream ticket is not one this server issued")
        if stored.run_id != _canonical(run_id):
            raise Unauthenticated(f"the stream ticket is for another run, not {quote(run_id)}")
        if stored.expires_at <= self._clock():
            raise Unauthenticated("the stream ticket has expired: mint another")
        return Caller(principal=stored.principal, tenant=stored.tenant)


def _canonical(run_id: str) -> str:
    """A run id as stored (lowercase, with hyphens); "" for what is not a UUID."""
    try:
        return str(uuid.UUID(run_id))
    except ValueError:
        return ""
