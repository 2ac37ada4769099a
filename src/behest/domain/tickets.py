"""Stream tickets: short-lived credentials that let a browser's EventSource (which cannot send
an Authorization header) watch one run over server-sent events as the caller that minted it.

Stored by the SHA-256 of the secret only; the secret itself exists in the minting answer alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamTicket:
    """A ticket as stored: whose it is, the one run it opens, until when."""

    digest: str  # SHA-256 of the ticket's secret, 64 lowercase hex
    run_id: str
    tenant: str
    principal: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class MintedTicket:
    """A new ticket's secret (only ever in the answer to its caller) and its expiry."""

    ticket: str
    expires_at: datetime
