"""What replicas sharing one PostgreSQL NOTIFY each other: the channels, their payloads.

The committing transaction itself sends `pg_notify('behest_events', …)` naming the runs and
their last sequence (`notify` inside the write function), so PostgreSQL delivers it at COMMIT
and only if the transaction commits. Signals ("cancel run X") travel the same way on
`behest_signals`; channel.py listens to both.

Payloads are compact JSON, ASCII only (so one character is one byte in any server encoding),
kept under PostgreSQL's 8,000-byte limit by splitting a batch's runs over several:

    {"node":"replica-a","last":{"<run id>":17,"<run id>":4}}
    {"node":"replica-a","kind":"cancel","run":"<run id>"}

Any PostgreSQL role on the database may NOTIFY these channels, so decoding trusts nothing:
anything malformed decodes to None (and the listener drops it with a warning).

Cost: PostgreSQL serialises the commits of transactions that NOTIFY (they take one lock on
the notification queue at commit), so notify once per group commit, not once per event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeGuard

from sqlalchemy import Connection, text

from behest import bounded_json

EVENTS = "behest_events"
SIGNALS = "behest_signals"
# Signals of workers' tasks: one of a tenant's was queued (its "run" names the tenant), one's
# result was taken (the execution id), one asked a question, or one's question was answered
# (the execution id).
TASK_QUEUED, TASK_DONE = "task", "result"
TASK_ASKED, TASK_ANSWERED = "asked", "answered"

# PostgreSQL refuses payloads of 8,000 bytes or more; we send some room to spare.
POSTGRES_PAYLOAD_BYTES = 8000
MAX_PAYLOAD_BYTES = 7900
# Node names, run ids and signal kinds are short (a hostname, a uuid, a word). At 256
# characters even fully escaped (12 bytes per character) a node and one run fit a payload.
MAX_NAME_CHARS = 256
MAX_SEQUENCE = 2**63 - 1

_NOTIFY = text("SELECT pg_notify(:channel, :payload)")


def events_payloads(node: str, last: Mapping[str, int]) -> list[str]:
    """`last` ({run id: last sequence}) from `node`, as payloads each under MAX_PAYLOAD_BYTES.

    Raises ValueError for a name longer than MAX_NAME_CHARS or a sequence outside 0..2**63-1
    (a caller's bug; the store's ids and sequences never are)."""
    head = '{"node":' + _encode_name(node, "node") + ',"last":{'
    tail = "}}"
    payloads: list[str] = []
    entries: list[str] = []
    size = len(head) + len(tail)
    for run_id, sequence in last.items():
        entry = _encode_name(run_id, "run id") + ":" + str(_check_sequence(sequence))
        cost = len(entry) + (1 if entries else 0)
        if entries and size + cost > MAX_PAYLOAD_BYTES:
            payloads.append(head + ",".join(entries) + tail)
            entries, size, cost = [], len(head) + len(tail), len(entry)
        entries.append(entry)
        size += cost
    if entries:
        payloads.append(head + ",".join(entries) + tail)
    return payloads


def decode_events(payload: str) -> tuple[str, dict[str, int]] | None:
    """(node, {run id: last sequence}) from an events payload; None if it is malformed."""
    value = _parse(payload)
    if value is None:
        return None
    node, last = value.get("node"), value.get("last")
    if not _is_name(node) or not isinstance(last, dict) or not last:
        return None
    for run_id, sequence in last.items():
        if not _is_name(run_id) or not _is_sequence(sequence):
            return None
    return node, last


def signal_payload(node: str, kind: str, run_id: str) -> str:
    """A signal (e.g. kind "cancel") about one run, from `node`."""
    return (
        f'{{"node":{_encode_name(node, "node")},"kind":{_encode_name(kind, "kind")},'
        f'"run":{_encode_name(run_id, "run id")}}}'
    )


def decode_signal(payload: str) -> tuple[str, str, str] | None:
    """(node, kind, run id) from a signal payload; None if it is malformed."""
    value = _parse(payload)
    if value is None:
        return None
    node, kind, run_id = value.get("node"), value.get("kind"), value.get("run")
    if not (_is_name(node) and _is_name(kind) and _is_name(run_id)):
        return None
    return node, kind, run_id


def notify(conn: Connection, channel: str, payload: str) -> None:
    """Queue a notification in `conn`'s transaction: sent at COMMIT, dropped on rollback."""
    conn.execute(_NOTIFY, {"channel": channel, "payload": payload})


def _encode_name(value: str, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise ValueError(f"a notification's {what} must be 1 to {MAX_NAME_CHARS} characters")
    return json.dumps(value)


def _check_sequence(value: int) -> int:
    if not _is_sequence(value):
        raise ValueError(f"a notification's sequence must be an integer 0 to {MAX_SEQUENCE}")
    return value


def _is_name(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS


def _is_sequence(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_SEQUENCE


def _parse(payload: str) -> dict[str, Any] | None:
    """The JSON object in `payload`; None for anything else (payloads are flat: depth 2)."""
    if not isinstance(payload, str):
        return None
    try:
        value = bounded_json.parse(payload, max_bytes=POSTGRES_PAYLOAD_BYTES, max_depth=2)
    except bounded_json.JsonRefused:
        return None
    return value if isinstance(value, dict) else None
