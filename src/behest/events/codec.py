"""Event payloads ⇄ (kind, JSON text) for storage; the kind is its stable name (KINDS)."""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from behest.domain import events as ev
from behest.domain.messages import ToolCall
from behest.domain.runs import FinishReason, RunStatus, TokenUsage
from behest.domain.spend import BudgetKind, CancelSource, FailureCode, Money
from behest.domain.waits import Decision


def encode(payload: ev.Payload) -> tuple[str, str]:
    """Return the payload's kind and its JSON text."""
    return ev.KINDS[type(payload)], json.dumps(_plain(payload), separators=(",", ":"))


def _plain(value: Any) -> Any:
    """A payload as JSON-ready values; nested dataclasses (ToolCall, TokenUsage) as objects.

    Shallow on purpose: `dataclasses.asdict` deep-copies every value, which is most of the
    cost of encoding a text delta.
    """
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def decode(kind: str, text: str) -> ev.Payload:
    """Rebuild a payload stored by `encode`."""
    cls = ev.PAYLOADS[kind]
    data = json.loads(text)
    for f in fields(cls):
        value = data.get(f.name)
        if f.name == "call":
            data[f.name] = ToolCall(**value)
        elif f.name == "usage":
            data[f.name] = TokenUsage(**value)
        elif f.name == "finish_reason":
            data[f.name] = FinishReason(value)
        elif f.name == "decision":
            data[f.name] = Decision(value)
        elif f.name == "expires_at":
            data[f.name] = datetime.fromisoformat(value)
        elif value is None:
            continue  # a field added later: the payload's default
        elif f.name == "cost":
            data[f.name] = Money(Decimal(value["amount"]), value["currency"])
        elif f.name == "code":
            data[f.name] = FailureCode(value)
        elif f.name == "source":
            data[f.name] = CancelSource(value)
        elif f.name == "budget":
            data[f.name] = BudgetKind(value)
        elif f.name == "status":
            data[f.name] = RunStatus(value)
    return cls(**data)
