"""Doom-loop detection: a model repeating the same tool calls without getting anywhere.

The rule of behest 0.3.1: the same tool with the same arguments (keys sorted) three times in
a row, or a cycle of 2 to 4 calls repeated three times in a row.
"""

from __future__ import annotations

import json

from behest import bounded_json
from behest.domain import events as ev
from behest.domain.messages import ToolCall
from behest.domain.spend import FailureCode
from behest.errors import RunStopped
from behest.events.run_log import RunLog

REPEATS = 3
CYCLE_LENGTHS = (1, 2, 3, 4)


def fingerprint(call: ToolCall) -> str:
    """The call's tool name and arguments, with object keys sorted."""
    try:
        arguments = json.dumps(bounded_json.parse(call.arguments or "{}"), sort_keys=True)
    except bounded_json.JsonRefused:
        arguments = call.arguments
    return f"{call.name}({arguments})"


class DoomLoopDetector:
    """Feed it every tool call of a run in order; it says when the calls start to loop."""

    def __init__(self) -> None:
        self._history: list[str] = []

    async def check(self, calls: list[ToolCall], log: RunLog) -> None:
        """Observe a turn's calls; a loop is told (DoomLoopDetected) and stops the run."""
        for call in calls:
            description = self.observe(call)
            if description:
                await log.emit(ev.DoomLoopDetected(description))
                raise RunStopped(f"doom loop detected: {description}", FailureCode.DOOM_LOOP)

    def observe(self, call: ToolCall) -> str | None:
        """Record a call; return a description if the history now ends in a loop."""
        self._history.append(fingerprint(call))
        for length in CYCLE_LENGTHS:
            span = length * REPEATS
            if len(self._history) < span:
                continue
            tail = self._history[-span:]
            cycle = tail[:length]
            if length > 1 and len(set(cycle)) == 1:
                continue  # a repeated single call is reported as such
            if tail == cycle * REPEATS:
                return _describe(cycle)
        return None


def _describe(cycle: list[str]) -> str:
    if len(cycle) == 1:
        return f"the model called {cycle[0]} {REPEATS} times in a row"
    joined = " → ".join(cycle)
    return f"the model repeated the cycle {joined} {REPEATS} times in a row"
