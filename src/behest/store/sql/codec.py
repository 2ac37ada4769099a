"""Event payloads ⇄ (kind, JSON text) for storage; the kind is its stable name (KINDS)."""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from behest.domain import events as ev
from behest.domain.content import ContentPart, PartKind
from behest.domain.executions import Verdict
from behest.domain.messages import ToolCall
from behest.domain.runs import BusyPolicy, FinishReason, RunStatus
from behest.domain.spend import BudgetKind, CancelSource, FailureCode, Money, TokenUsage
from behest.domain.waits import Decision, ElicitAction


def encode(payload: ev.Payload) -> tuple[str, str]:
    """Return the payload's kind and its JSON text."""
    return ev.KINDS[type(payload)], json.dumps(_plain(payload), separators=(",", ":"))


def _plain(value: Any) -> Any:
    """A payload as JSON-ready values; nested dataclasses (ToolCall, TokenUsage) as objects.

    Shallow on purpose: `dataclasses.asdict` deep-copies every value, which is most of the
    cost of encoding a text delta.
    """
    if is_dataclass(value):
        plain = {}
        for name in _names(type(value)):
            item = getattr(value, name)
            if not isinstance(item, bytes):  # a content part is stored as its reference
                plain[name] = _plain(item)
        return plain
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    """A dataclass's field names, looked up once per class (`fields` is slow for a hot path)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def parts_json(parts: tuple[ContentPart, ...]) -> str:
    """Content parts as stored (in events and in messages.parts): references, no bytes."""
    return json.dumps([_plain(part) for part in parts], separators=(",", ":"))


_TEXT_DELTA = ev.KINDS[ev.TextDelta]
# Each payload's field names, looked up once (dataclasses.fields per event cost a third of a
# replay's decoding).
_FIELDS = {cls: _names(cls) for cls in ev.KINDS}


def decode(kind: str, text: str) -> ev.Payload:
    """Rebuild a payload stored by `encode`."""
    data = json.loads(text)
    if kind == _TEXT_DELTA:  # most stored events: the shortest way (replays read thousands)
        return ev.TextDelta(data["delta"])
    cls = ev.PAYLOADS[kind]
    for name in _FIELDS[cls]:
        value = data.get(name)
        if name == "call":
            data[name] = ToolCall(**value)
        elif name == "usage":
            data[name] = TokenUsage(**value)
        elif name == "finish_reason":
            data[name] = FinishReason(value)
        elif name == "decision":
            data[name] = Decision(value)
        elif name == "expires_at":
            data[name] = datetime.fromisoformat(value)
        elif value is None:
            continue  # a field added later: the payload's default
        elif name == "cost":
            data[name] = Money(Decimal(value["amount"]), value["currency"])
        elif name == "code":
            data[name] = FailureCode(value)
        elif name == "source":
            data[name] = CancelSource(value)
        elif name == "budget":
            data[name] = BudgetKind(value)
        elif name == "status":
            data[name] = RunStatus(value)
        elif name == "content":
            data[name] = tuple(content_part(part) for part in value)
        elif name == "verdict":
            data[name] = Verdict(value)
        elif name == "on_busy":
            data[name] = BusyPolicy(value)
        elif name == "action":
            data[name] = ElicitAction(value)
    return cls(**data)


def content_part(value: dict[str, Any]) -> ContentPart:
    """A content part stored as JSON (a reference: no bytes)."""
    return ContentPart(**{**value, "kind": PartKind(value["kind"])})
