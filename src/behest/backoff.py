"""The one backoff of behest: how long to wait after a failed attempt before the next.

Full jitter (a uniform draw from 0 to the attempt's ceiling, the ceiling doubling per attempt
up to a cap): many clients retrying at once spread out instead of arriving together. Used by
model-call retries, the client's and the worker SDK's reconnects, the replicas' notification
channel, terminal-step writes, SQLite's WAL switch and MCP server restarts.
"""

from __future__ import annotations

import random


def backoff_s(
    attempt: int, *, initial_s: float, max_s: float, rng: random.Random | None = None
) -> float:
    """The wait after failed attempt number `attempt` (1-based): uniform from 0 to
    min(max_s, initial_s * 2 ** (attempt - 1))."""
    ceiling = min(max_s, initial_s * 2 ** min(max(attempt, 1) - 1, 62))
    return (rng or random).uniform(0.0, ceiling)
