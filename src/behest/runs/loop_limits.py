"""What a run's loop is given (LoopLimits, from the settings) and what it ends with when it
does not fail (Outcome)."""

from __future__ import annotations

from dataclasses import dataclass, field

from behest.domain.runs import FinishReason
from behest.domain.spend import TokenUsage
from behest.runs.asking import AskPolicy
from behest.runs.waiting import WaitPolicy


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopLimits:
    """The loop's knobs (from Settings); retries and timeouts come from the provider's config."""

    max_iterations: int = 10
    tool_concurrency: int = 4
    compaction_cooldown_s: float = 300.0
    coalesce_text_deltas: bool = True
    waits: WaitPolicy = field(default_factory=WaitPolicy)
    asks: AskPolicy = field(default_factory=AskPolicy)
    # This process's name in run claims: who executed a tool, in its execution's record.
    node: str = ""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run that did not fail ended."""

    finish_reason: FinishReason
    iterations: int
    usage: TokenUsage
