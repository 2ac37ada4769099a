"""Compaction settings and the circuit breaker's state."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionConfig:
    """How transcripts are compacted; defaults are those of behest 0.3.1."""

    auto: bool = True
    prune: bool = False
    buffer_tokens: int = 20_000
    keep_tokens: int = 8_000
    tail_turns: int = 2
    model: str = ""
    provider: str = ""
    circuit_breaker_threshold: int = 3

    def problems(self) -> list[str]:
        """What is wrong with this config, one message per field; empty when valid."""
        found = []
        if self.buffer_tokens <= 0:
            found.append("buffer_tokens must be greater than 0")
        if self.keep_tokens <= 0:
            found.append("keep_tokens must be greater than 0")
        if self.tail_turns <= 0:
            found.append("tail_turns must be at least 1")
        if self.circuit_breaker_threshold <= 0:
            found.append("circuit_breaker_threshold must be at least 1")
        if bool(self.model) != bool(self.provider):
            found.append("provider and model must be given together (or both left empty)")
        if self.keep_tokens >= 1_000_000_000 or self.buffer_tokens >= 1_000_000_000:
            found.append("buffer_tokens and keep_tokens must be below 1,000,000,000")
        return found


@dataclass(frozen=True, slots=True, kw_only=True)
class CircuitBreakerState:
    """Consecutive compaction failures across runs; open once they reach the threshold."""

    consecutive_failures: int = 0
    opened_at: datetime | None = None

    def is_open(self, *, now: datetime, cooldown_s: float) -> bool:
        """Open from `opened_at` until the cool-down has passed."""
        return self.opened_at is not None and now < self.opened_at + timedelta(seconds=cooldown_s)
