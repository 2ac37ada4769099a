"""A run's saved state: where it is in the loop, enough to resume it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from behest.domain.runs import FinishReason, RunStatus
from behest.domain.spend import Money, TokenUsage


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Written at every state boundary with that step's events; removed when the run ends."""

    run_id: str
    session_id: str
    status: RunStatus
    iteration: int
    usage: TokenUsage
    updated_at: datetime
    # Loop bookkeeping that is not in the events: model calls made, pending tool call ids.
    model_calls: int = 0
    pending_tool_calls: tuple[str, ...] = field(default_factory=tuple)
    # How the last model answer ended (for a run interrupted right after its final answer).
    finish_reason: FinishReason = FinishReason.UNSPECIFIED
    # What budgets count that the run row does not hold: tool calls made, cost so far.
    tool_calls: int = 0
    cost: Money | None = None
