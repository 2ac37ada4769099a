"""Data stored before tenants existed belongs to the default tenant after migration 0006."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from behest.domain.callers import DEFAULT_TENANT
from behest.domain.runs import RunFilter
from behest.store.sql.store import SqlStore
from tests.support import sqlite_at_revision


async def test_runs_sessions_and_compaction_settings_move_to_the_default_tenant(
    tmp_path: Path,
) -> None:
    path = tmp_path / "behest.db"
    sqlite_at_revision(path, "0005")
    with sqlite3.connect(path) as db:  # what a 0.4 server left behind
        db.execute(
            "INSERT INTO sessions (id, created_at, updated_at, active_run_id)"
            " VALUES ('s1', '2026-11-01 00:00:00', '2026-11-01 00:00:00', NULL)"
        )
        db.execute(
            "INSERT INTO runs (id, session_id, status, provider, model, input, metadata,"
            " tool_choice, created_at, updated_at, iterations, finish_reason, input_tokens,"
            " output_tokens, error, traceparent) VALUES ('r1', 's1', 7, 'local', 'echo', 'hi',"
            " '', 'auto', '2026-11-01 00:00:00', '2026-11-01 00:00:00', 1, 1, 3, 4, '', '')"
        )
        db.execute(
            "INSERT INTO compaction_config (id, auto, prune, buffer_tokens, keep_tokens,"
            " tail_turns, model, provider, circuit_breaker_threshold)"
            " VALUES (1, 1, 1, 111, 222, 3, '', '', 4)"
        )
        db.execute(
            "INSERT INTO circuit_breaker (id, consecutive_failures, opened_at) VALUES (1, 2, NULL)"
        )
    store = SqlStore(f"sqlite+aiosqlite:///{path}")
    await store.start()  # migrates to head
    try:
        run = await store.get_run("r1")
        listed = await store.list_runs(tenant=DEFAULT_TENANT, wanted=RunFilter(limit=10))
        elsewhere = await store.list_runs(tenant="acme", wanted=RunFilter(limit=10))
        kept = await store.get_compaction_config(tenant=DEFAULT_TENANT)
        others = await store.get_compaction_config(tenant="acme")
        breaker = await store.get_circuit_breaker(tenant=DEFAULT_TENANT)
    finally:
        await store.close()
    assert run is not None and run.tenant == DEFAULT_TENANT
    assert [r.id for r in listed] == ["r1"] and elsewhere == []
    assert (kept.buffer_tokens, kept.keep_tokens, kept.circuit_breaker_threshold) == (111, 222, 4)
    assert others.buffer_tokens != 111  # a tenant with no settings of its own: the defaults
    assert breaker.consecutive_failures == 2
