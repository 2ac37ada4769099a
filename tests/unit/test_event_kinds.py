"""Event kinds have one registry of stable names: the stored kind and the AgentEvent field."""

from __future__ import annotations

import dataclasses
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from behest._proto.agent.v1 import run_pb2 as pb
from behest.api import convert
from behest.client import _wire
from behest.client._events import EVENT_TYPES
from behest.domain import events as ev
from behest.domain.runs import FinishReason
from behest.domain.spend import TokenUsage
from behest.store.sql import codec
from behest.store.sql.store import SqlStore
from tests.support import sqlite_at_revision


def test_every_kind_is_a_field_of_agent_events_oneof_and_back() -> None:
    oneof = {f.name for f in pb.AgentEvent.DESCRIPTOR.oneofs_by_name["event"].fields}
    assert set(ev.KINDS.values()) == oneof
    assert set(ev.PAYLOADS) == oneof


def test_every_payload_field_is_a_field_of_its_kinds_message() -> None:
    for cls, kind in ev.KINDS.items():
        message = pb.AgentEvent.DESCRIPTOR.fields_by_name[kind].message_type
        names = {f.name for f in dataclasses.fields(cls)}
        assert names <= set(message.fields_by_name), (kind, names - set(message.fields_by_name))


def test_stored_kinds_are_the_stable_names() -> None:
    assert codec.encode(ev.TextDelta("hi")) == ("text_delta", '{"delta":"hi"}')
    kind, text = codec.encode(ev.UsageRecorded(TokenUsage(3, 4)))
    assert kind == "usage_recorded"
    assert codec.decode(kind, text) == ev.UsageRecorded(TokenUsage(3, 4))


def test_the_client_and_the_converter_agree_on_terminal_events() -> None:
    now = datetime.now(UTC)
    for payload in (ev.RunCompleted(FinishReason.STOP, 1), ev.RunFailed("x"), ev.RunCancelled()):
        event = convert.event(ev.Event(run_id="r", sequence=1, payload=payload, timestamp=now))
        assert _wire.event_of(event).terminal
    terminal = {
        kind
        for kind, cls in EVENT_TYPES.items()
        if _wire.event_of(pb.AgentEvent(**{kind: getattr(pb, f"{cls.__name__}Event")()})).terminal
    }
    assert terminal == ev.TERMINAL_KINDS == {"run_completed", "run_failed", "run_cancelled"}


async def test_events_stored_under_class_names_are_renamed_by_the_migration(
    tmp_path: Path,
) -> None:
    path = tmp_path / "behest.db"
    sqlite_at_revision(path, "0004")
    with sqlite3.connect(path) as db:  # a 0.4 database: kinds were class names
        db.execute(
            "INSERT INTO events (run_id, sequence, kind, payload, created_at, trace_id, span_id)"
            " VALUES ('r1', 1, 'TextDelta', '{\"delta\":\"old\"}', '2026-11-01 00:00:00', '', '')"
        )
    store = SqlStore(f"sqlite+aiosqlite:///{path}")
    await store.start()  # migrates to head
    try:
        (event,) = await store.read_events("r1", after=0, limit=10)
    finally:
        await store.close()
    assert event.payload == ev.TextDelta("old")
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT kind FROM events").fetchall() == [("text_delta",)]
