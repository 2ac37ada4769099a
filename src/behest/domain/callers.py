"""Who is calling: an authenticated principal of one tenant.

Everything a tenant creates (sessions, runs, their events and snapshots, idempotency keys,
compaction settings) belongs to it and is invisible to every other tenant. Without
authentication every caller is the default tenant's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_TENANT = "default"


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller: `principal` (a person, a service) of `tenant`, with the
    roles its credentials name (`[auth] approver_role` gates approvals on one)."""

    principal: str
    tenant: str
    roles: frozenset[str] = field(default_factory=frozenset)


ANONYMOUS = Caller(principal="anonymous", tenant=DEFAULT_TENANT)
