"""What one run has done so far, and the state writes that record it with each step.

The agent loop, its turn assembly and its tool runner share one RunProgress: the session's
transcript as this run knows it, the next free message position, the counters and usage a
snapshot holds, and the tool calls executing now.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from behest.domain.messages import Message, Role
from behest.domain.runs import FinishReason, Run, RunStatus
from behest.domain.snapshots import Snapshot
from behest.domain.spend import Money, Prices, TokenUsage
from behest.runs.compactor import Compacted
from behest.runs.sub_runs import SPAWN_TOOL
from behest.store.base import Store
from behest.store.writes import PutSnapshot, RecordExecution, UpdateRun, Write


@dataclass(frozen=True, slots=True)
class Cut:
    """A tool call cut while it ran: its tool, how long it had run, its record's change."""

    tool_name: str
    seconds: float
    record: RecordExecution


class RunProgress:
    """A run's transcript, positions and counters; `state(status)` writes them down."""

    def __init__(self, run: Run, transcript: list[Message] | None = None) -> None:
        """`transcript`: the session's messages, when the caller knows them (a new session)."""
        self.run = run
        self._transcript_known = transcript is not None
        self.transcript: list[Message] = list(transcript or ())
        self.next_position = 0
        self.iteration = 0
        self.model_calls = 0
        self.usage = TokenUsage()
        self.cost: Money | None = None
        self.tool_calls = 0
        # What the run's sub-agent runs spent (their own runs record it; budgets count it).
        self.children_tokens = 0
        self.children_cost = Decimal(0)
        self.finish_reason = FinishReason.UNSPECIFIED
        self.executing: set[str] = set()
        # Calls cut while they ran (by call id): told in the run's end if it is a cancel.
        self.cut: dict[str, Cut] = {}
        # Questions of running tools that wait for an answer (runs/asking.py): while any
        # does, the run shows WAITING_FOR_INPUT (its snapshot still says what it executes).
        self.asking = 0
        # The tools whose calls start child runs: spawn_agent, and its agent's sub-agents.
        self.child_tools: set[str] = {SPAWN_TOOL}

    async def load(self, store: Store) -> None:
        """Read the session's transcript (unless known) and find the next free position."""
        if not self._transcript_known:
            self.transcript = await store.session_messages(self.run.session_id)
        self.next_position = self.transcript[-1].position + 1 if self.transcript else 0

    def restore(self, snapshot: Snapshot) -> None:
        """Take the counters of a snapshot (a run resumed after a crash or shutdown)."""
        self.iteration, self.model_calls = snapshot.iteration, snapshot.model_calls
        self.usage, self.finish_reason = snapshot.usage, snapshot.finish_reason
        self.cost, self.tool_calls = snapshot.cost, snapshot.tool_calls

    def spend(self, usage: TokenUsage, prices: Prices | None) -> Money | None:
        """Count a model call's usage (and its cost, at `prices`); the call's cost."""
        cost = None if prices is None else usage.cost(prices)
        self.add(usage, cost)
        return cost

    def add(self, usage: TokenUsage, cost: Money | None) -> None:
        """Count usage and its cost (a cost in another currency than the run's is left out:
        the run's total stays in one currency)."""
        self.usage += usage
        if cost is None:
            return
        if self.cost is None:
            self.cost = cost
        elif self.cost.currency == cost.currency:
            self.cost += cost

    def spawn_number(self, call_id: str) -> int:
        """Which of this run's calls that start a child `call_id` is (1-based; the next if
        new)."""
        names = self.child_tools
        spawns = [c.id for m in self.mine() for c in m.tool_calls if c.name in names]
        return spawns.index(call_id) + 1 if call_id in spawns else len(spawns) + 1

    def count_child(self, child: Run) -> None:
        """A sub-agent run ended: its spend counts against this run's budgets."""
        self.children_tokens += child.usage.total_tokens
        if child.cost is not None:
            self.children_cost += child.cost.amount

    def mine(self) -> list[Message]:
        """This run's messages of the transcript."""
        return [m for m in self.transcript if m.run_id == self.run.id]

    def message(
        self, role: Role, text: str, *, position: int | None = None, **fields: object
    ) -> Message:
        """A new message of this run, at the next free position of the session (or at one
        reserved earlier with `reserve`)."""
        if position is None:
            position = self.reserve(1)
        return Message(
            id=str(uuid.uuid4()),
            session_id=self.run.session_id,
            run_id=self.run.id,
            position=position,
            role=role,
            # Stored text cannot hold NUL (PostgreSQL); a tool reading a binary file may send one.
            text=text.replace("\x00", "\ufffd"),
            created_at=datetime.now(UTC),
            **fields,  # type: ignore[arg-type]
        )

    def reserve(self, count: int) -> int:
        """Take `count` positions for messages made later (in any order); the first one."""
        first = self.next_position
        self.next_position += count
        return first

    def remember(self, message: Message) -> None:
        """Add a message to the transcript once it is queued for commit, in position order."""
        self.transcript.append(message)
        if len(self.transcript) > 1 and self.transcript[-2].position > message.position:
            self.transcript.sort(key=lambda m: m.position)  # parallel tools finish any order

    def adopt(self, compacted: Compacted | None) -> None:
        """Continue with a compacted transcript."""
        if compacted is not None:
            self.transcript = compacted.transcript
            self.next_position += int(compacted.used_position)

    def _shown(self, status: RunStatus) -> RunStatus:
        """The status the run shows: WAITING_FOR_INPUT while one of its tools asks."""
        asks = self.asking and status == RunStatus.WAITING_FOR_TOOLS
        return RunStatus.WAITING_FOR_INPUT if asks else status

    def state(self, status: RunStatus) -> list[Write]:
        """The run's progress and snapshot, to commit with the step that reaches `status`."""
        return [
            UpdateRun(
                run_id=self.run.id,
                status=self._shown(status),
                iterations=self.iteration,
                usage=self.usage,
                cost=self.cost,
            ),
            PutSnapshot(
                Snapshot(
                    run_id=self.run.id,
                    session_id=self.run.session_id,
                    status=status,
                    iteration=self.iteration,
                    usage=self.usage,
                    updated_at=datetime.now(UTC),
                    model_calls=self.model_calls,
                    pending_tool_calls=tuple(sorted(self.executing)),
                    finish_reason=self.finish_reason,
                    tool_calls=self.tool_calls,
                    cost=self.cost,
                )
            ),
        ]
