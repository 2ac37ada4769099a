"""Compaction inside a run: when to compact, prune or summarise, and the circuit breaker.

Policy (token estimates, what is kept) lives in runs/compaction.py; this module does the
I/O: events, the summary call, the stored summary, and counting outcomes across runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from behest.domain import events as ev
from behest.domain.compaction import CompactionConfig
from behest.domain.messages import Message, Role
from behest.domain.runs import Run
from behest.errors import ProviderError
from behest.events.run_log import RunLog
from behest.observability.telemetry import current
from behest.runs import compaction
from behest.runs.summariser import Summary
from behest.store.base import Store
from behest.store.writes import AppendMessage, ClearToolResults, Write

Summarise = Callable[[Sequence[Message]], Awaitable[Summary]]


@dataclass(frozen=True, slots=True)
class Compacted:
    """The transcript after a compaction, and whether it used the next message position."""

    transcript: list[Message]
    used_position: bool


class _Failed(Exception):
    pass


class Compactor:
    """Compacts one run's context before model calls, and after a context overflow."""

    def __init__(
        self,
        *,
        run: Run,
        log: RunLog,
        store: Store,
        config: CompactionConfig,
        context_window: int,
        summarise: Summarise,
        cooldown_s: float,
    ) -> None:
        self._run = run
        self._log = log
        self._store = store
        self._config = config
        # The buffer is capped at half the window, so that a small model is not compacted
        # before every call by a buffer sized for large ones.
        self._threshold = context_window - min(config.buffer_tokens, context_window // 2)
        self._summarise = summarise
        self._cooldown_s = cooldown_s
        # Summary calls made and not yet counted by the run (budgets, usage): take_spent().
        self._spent: list[Summary] = []
        self._metrics = current().metrics

    def take_spent(self) -> list[Summary]:
        """The summary calls made since the last time, for the run to count."""
        spent, self._spent = self._spent, []
        return spent

    async def before_call(self, transcript: list[Message], position: int) -> Compacted | None:
        """Compact if the context has reached the window minus buffer_tokens (and may)."""
        if not self._config.auto:
            return None
        if compaction.estimate_tokens(compaction.context(transcript)) < self._threshold:
            return None
        breaker = await self._store.get_circuit_breaker(tenant=self._run.tenant)
        self._metrics.breaker(self._run.tenant, breaker, self._cooldown_s)
        if breaker.is_open(now=datetime.now(UTC), cooldown_s=self._cooldown_s):
            return None
        return await self._compact(transcript, position, reason="threshold")

    async def after_overflow(self, transcript: list[Message], position: int) -> Compacted | None:
        """Compact because the provider said the context does not fit (breaker or not)."""
        return await self._compact(transcript, position, reason="overflow")

    async def _compact(
        self, transcript: list[Message], position: int, *, reason: str
    ) -> Compacted | None:
        current = compaction.context(transcript)
        before = compaction.estimate_tokens(current)
        await self._log.emit(ev.CompactionStarted(len(current), before, reason))
        try:
            compacted, writes, pruned_only = await self._shrink(current, before, position, reason)
        except _Failed as failure:
            await self._log.emit(
                ev.CompactionFinished(len(current), before, False, False, str(failure))
            )
            await self._record(succeeded=False)
            self._metrics.compacted("failed", reason)
            return None
        after = compaction.context(compacted)
        await self._log.emit(
            ev.CompactionFinished(len(after), compaction.estimate_tokens(after), pruned_only, True),
            state=writes,
        )
        await self._record(succeeded=True)
        self._metrics.compacted("pruned" if pruned_only else "summarised", reason)
        merged = self._merge(transcript, compacted, writes)
        return Compacted(merged, used_position=not pruned_only)

    async def _shrink(
        self, current: list[Message], before: int, position: int, reason: str
    ) -> tuple[list[Message], list[Write], bool]:
        start = compaction.tail_start(
            current, tail_turns=self._config.tail_turns, keep_tokens=self._config.keep_tokens
        )
        writes: list[Write] = []
        if self._config.prune and start > 0:
            pruned = compaction.prune(current, before=start)
            if pruned != current:
                writes.append(
                    ClearToolResults(
                        session_id=self._run.session_id,
                        through_position=_last_original(current[:start]),
                        text=compaction.PRUNED_TEXT,
                    )
                )
                current = pruned
                enough = compaction.estimate_tokens(current) < self._threshold
                if enough and reason == "threshold":
                    return current, writes, True
        head, tail = current[:start], current[start:]
        if not head:
            raise _Failed("nothing is old enough to summarise (the current turn alone is too big)")
        try:
            made = await self._summarise(head)
        except (ProviderError, TimeoutError) as exc:
            raise _Failed(f"the summary call failed: {exc or 'timed out'}") from exc
        self._spent.append(made)
        summary = self._summary(made.text, head, position)
        after = [summary, *tail]
        if compaction.estimate_tokens(after) >= before:
            raise _Failed("the summary did not make the context smaller")
        writes.append(AppendMessage(summary))
        return after, writes, False

    def _summary(self, text: str, head: list[Message], position: int) -> Message:
        through = _last_original(head)
        return Message(
            id=str(uuid.uuid4()),
            session_id=self._run.session_id,
            run_id=self._run.id,
            position=position,
            role=Role.SYSTEM,
            text=f"Summary of the conversation so far:\n{text}",
            created_at=datetime.now(UTC),
            summary_through=through,
        )

    @staticmethod
    def _merge(
        transcript: list[Message], compacted: list[Message], writes: list[Write]
    ) -> list[Message]:
        """The full transcript after the compaction: pruned texts and the new summary."""
        pruned = {m.id: m for m in compacted}
        merged = [pruned.get(m.id, m) for m in transcript]
        merged.extend(w.message for w in writes if isinstance(w, AppendMessage))
        return merged

    async def _record(self, *, succeeded: bool) -> None:
        now = datetime.now(UTC)
        tenant = self._run.tenant
        was_open = (await self._store.get_circuit_breaker(tenant=tenant)).is_open(
            now=now, cooldown_s=self._cooldown_s
        )
        state = await self._store.record_compaction(
            tenant=tenant,
            succeeded=succeeded,
            threshold=self._config.circuit_breaker_threshold,
            now=now,
        )
        self._metrics.breaker(tenant, state, self._cooldown_s)
        if not was_open and state.is_open(now=now, cooldown_s=self._cooldown_s):
            await self._log.emit(ev.CompactionCircuitOpened(state.consecutive_failures))


def _last_original(messages: Sequence[Message]) -> int:
    """The last position the messages stand for (a summary stands for its summary_through)."""
    return max(m.position if m.summary_through is None else m.summary_through for m in messages)
