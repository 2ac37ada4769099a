"""Stream tickets (runs/tickets.py over store/sql/tickets.py), on both backends: minted for a
run, honoured by every store of the database until they expire, for that run only; only their
SHA-256 is stored, and expired ones are pruned as new ones are minted."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from behest.domain.callers import Caller
from behest.errors import Unauthenticated
from behest.runs.tickets import StreamTickets, digest_of
from behest.store.sql.store import SqlStore
from behest.store.sql.ticket_tables import stream_tickets
from tests.store.conftest import OpenStore
from tests.store.helpers import TENANT, at, create, new_id

ALICE = Caller(principal="alice", tenant=TENANT)


class Clock:
    """A settable clock for ticket expiry."""

    def __init__(self) -> None:
        self.now = at()

    def __call__(self) -> datetime:
        return self.now


async def stored_rows(store: SqlStore) -> list[dict[str, object]]:
    async with store.engines.reader.connect() as conn:
        return [dict(row._mapping) for row in await conn.execute(sa.select(stream_tickets))]


async def test_a_ticket_stands_for_its_minter_on_every_store_of_the_database(
    open_store: OpenStore,
) -> None:
    first, second = await open_store(), await open_store()
    run = await create(first)
    minted = await StreamTickets(first, ttl_s=300).mint(ALICE, run.id)

    caller = await StreamTickets(second, ttl_s=300).caller(minted.ticket, run.id)

    assert caller == ALICE
    assert minted.ticket.startswith("bst_")
    assert timedelta(seconds=299) < minted.expires_at - at() <= timedelta(seconds=300)


async def test_only_the_tickets_sha256_is_stored(store: SqlStore) -> None:
    run = await create(store)
    minted = await StreamTickets(store, ttl_s=300).mint(ALICE, run.id)

    rows = [row for row in await stored_rows(store) if row["run_id"] == run.id]

    assert [row["digest"] for row in rows] == [digest_of(minted.ticket)]
    assert minted.ticket not in repr(rows)
    assert minted.ticket.removeprefix("bst_") not in repr(rows)


async def test_a_ticket_for_another_run_is_refused(store: SqlStore) -> None:
    tickets = StreamTickets(store, ttl_s=300)
    run, other = await create(store), await create(store)
    minted = await tickets.mint(ALICE, run.id)

    with pytest.raises(Unauthenticated, match="another run"):
        await tickets.caller(minted.ticket, other.id)
    with pytest.raises(Unauthenticated, match="another run"):
        await tickets.caller(minted.ticket, "not-a-uuid")
    assert await tickets.caller(minted.ticket, run.id.upper()) == ALICE


async def test_an_expired_ticket_is_refused_and_pruned_by_the_next_mint(store: SqlStore) -> None:
    clock = Clock()
    tickets = StreamTickets(store, ttl_s=60, clock=clock)
    run = await create(store)
    old = await tickets.mint(ALICE, run.id)
    clock.now += timedelta(seconds=59)
    assert await tickets.caller(old.ticket, run.id) == ALICE

    clock.now += timedelta(seconds=1)
    with pytest.raises(Unauthenticated, match="expired"):
        await tickets.caller(old.ticket, run.id)
    new = await tickets.mint(ALICE, run.id)

    digests = {row["digest"] for row in await stored_rows(store) if row["run_id"] == run.id}
    assert digests == {digest_of(new.ticket)}


@pytest.mark.parametrize(
    "ticket",
    ["", "bst_", "bst_" + "A" * 42, "bst_" + "A" * 44, "xyz_" + "A" * 43, "bst_" + "!" * 43],
)
async def test_what_is_not_a_ticket_is_refused(store: SqlStore, ticket: str) -> None:
    with pytest.raises(Unauthenticated, match="not one this server"):
        await StreamTickets(store, ttl_s=300).caller(ticket, new_id())


async def test_a_well_formed_ticket_never_minted_is_refused(store: SqlStore) -> None:
    with pytest.raises(Unauthenticated, match="not one this server issued"):
        await StreamTickets(store, ttl_s=300).caller("bst_" + "A" * 43, new_id())
