"""Plain strings the pages show: moments, clipped text, JSON, tokens, money, durations."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from behest import wording
from behest.domain.runs import Run
from behest.domain.spend import Money, TokenUsage

# The longest text a section shows (a tool's output may be a megabyte), and a summary.
MAX_SECTION_CHARS = 20_000
MAX_SUMMARY_CHARS = 400


def stamp(moment: datetime) -> str:
    """A moment in UTC, to the millisecond."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def clip(text: str) -> str:
    if len(text) <= MAX_SECTION_CHARS:
        return text
    return f"{text[:MAX_SECTION_CHARS]}… ({len(text) - MAX_SECTION_CHARS} more characters)"


def pretty_json(text: str) -> str:
    try:
        return clip(json.dumps(json.loads(text), indent=2, ensure_ascii=False))
    except ValueError:
        return clip(text)


def tokens(usage: TokenUsage) -> str:
    return wording.tokens(usage, detail=True)


def money(cost: Money | None) -> str:
    return "—" if cost is None else wording.money(cost)


def duration(run: Run, now: datetime) -> str:
    """How long the run took (or has taken so far)."""
    end = run.updated_at if run.status.is_terminal else now
    seconds = max(0.0, (end - run.created_at).total_seconds())
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def trace_id(traceparent: str) -> str:
    """The trace id of a W3C traceparent ("" without one)."""
    parts = traceparent.split("-")
    return parts[1] if len(parts) == 4 else ""
