"""One AG-UI run as a part of a behest run's events: where it starts, where it ends, which
of its events are sent (after Last-Event-ID), and their SSE ids.

A behest run is one AG-UI run until it pauses (approvals, client tools), and one more after
each pause it is answered from. The events are read from the run's first (the translator
rebuilds its state from them, silently), and an AG-UI run that continues a pause starts once
that pause is found: the batch of request events that asked for the calls the input answers.
Its RUN_STARTED has that batch's last sequence as its id (an event the client holds already,
from the run that paused). The AG-UI run ends with the behest run, or at its next pause: the
calls ListPendingCalls names as waiting have all been asked for.

Ids: every SSE event produced from behest event N is sent only if N is past Last-Event-ID,
and the last of them carries `id: N`, so the id a client saw last always names a behest event
whose AG-UI events it has all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ag_ui.core import BaseEvent, RunErrorEvent, RunFinishedEvent

from behest.doors.agui_events import REQUESTS, Translator
from behest.doors.agui_history import History
from behest.doors.agui_wire import encode
from behest.doors.plain import sse_event


@dataclass(frozen=True, slots=True)
class Segment:
    """Which AG-UI run of a behest run a request follows."""

    run_id: str  # the AG-UI run's id (the input's runId)
    # The calls the input answers; none: the behest run's first AG-UI run, from its start.
    answered: frozenset[str] = frozenset()
    # Calls of the answered pause that still wait after the answers.
    waiting: frozenset[str] = frozenset()
    after: int = 0  # Last-Event-ID


class Follow:
    """Turns a behest run's events, read from its first, into one AG-UI run's SSE events."""

    def __init__(
        self,
        translator: Translator,
        segment: Segment,
        *,
        history: History,
        kept: Sequence[Any],
        waiting_now: Callable[[], Awaitable[frozenset[str]]],
    ) -> None:
        self._t = translator
        self._segment = segment
        self._history = history
        self._kept = kept  # the client's own messages, for a snapshot
        self._waiting_now = waiting_now
        self._inside = not segment.answered  # else: replaying up to the answered pause
        self._floor = segment.after  # events of this position or before are not sent
        self._batch: list[str] = []  # the call ids of the pause being read
        self._batch_end = 0
        self._batch_time: int | None = None  # its last request's time (ms)
        self._target = False  # the batch is the pause the input answers
        self._pending: frozenset[str] | None = None
        self.done = False

    async def frames(self, events: AsyncIterator[Any]) -> AsyncIterator[list[bytes]]:
        """Each behest event's SSE frames (often none), until the AG-UI run ends; the
        events' stream is closed then (a pause ends the AG-UI run, not the behest run)."""
        try:
            async for event in events:
                yield await self.step(event)
                if self.done:
                    return
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()

    async def step(self, event: Any) -> list[bytes]:
        kind = event.WhichOneof("event")
        frames: list[bytes] = []
        if self._batch and kind not in REQUESTS:
            frames = await self._batch_over()
            if self.done:
                return frames
        if kind in REQUESTS:
            return frames + await self._request(event)
        seq = event.sequence
        message = None
        wanted = self._t.wants_message(event)
        if wanted and self._inside and seq > self._floor:
            message = await self._history.find(wanted)
        out = self._t.feed(event, message)
        if out and _ends(out[-1]):
            self.done = True
        if not self._inside:
            return frames
        return frames + await self._frames(out, seq)

    async def _request(self, event: Any) -> list[bytes]:
        """A call the run asks an answer for: a pause, which may end the AG-UI run."""
        seq = event.sequence
        self._t.feed(event)
        payload = getattr(event, event.WhichOneof("event"))
        self._batch.append(payload.call.id)
        self._batch_end = seq
        self._batch_time = event.timestamp.ToMilliseconds() if event.HasField("timestamp") else None
        asked = set(self._batch)
        if not self._inside:
            segment = self._segment
            self._target = self._target or payload.call.id in segment.answered
            if self._target and segment.answered | segment.waiting <= asked:
                return await self._enter()
            return []
        if self._pending is None:
            self._pending = await self._waiting_now()
        if self._pending and self._pending <= asked:
            self.done = True
            return await self._frames(self._stamped(self._t.pause(self._pending)), seq)
        return []

    async def _batch_over(self) -> list[bytes]:
        """The pause just read is over (the run went on): inside the AG-UI run, someone
        answered it already; before it, it ended an earlier AG-UI run, or is the one the
        input answers."""
        if self._inside:
            self._batch, self._pending = [], None
            return []
        if self._target:
            return await self._enter()
        self._t.pause(self._batch)
        self._t.start(self._segment.run_id)
        self._batch = []
        return []

    async def _enter(self) -> list[bytes]:
        """The answered pause is found: the AG-UI run starts after it (and ends at once if
        some of its calls still wait)."""
        position, waiting = self._batch_end, self._segment.waiting
        self._t.pause(self._batch)
        self._batch, self._target, self._inside = [], False, True
        out = self._t.start(self._segment.run_id)
        if waiting:
            out += self._t.pause(waiting)
            self.done = True
        frames = await self._frames(self._stamped(out), position)
        self._floor = max(self._floor, position)
        return frames

    def _stamped(self, out: list[BaseEvent]) -> list[BaseEvent]:
        """The events a pause ends or starts an AG-UI run with, at its requests' time."""
        for item in out:
            item.timestamp = self._batch_time
        return out

    async def _frames(self, out: list[BaseEvent], position: int) -> list[bytes]:
        """The events of behest event `position` as SSE frames (none if the client has
        them), the last with its id; a snapshot before the AG-UI run's end when due."""
        if not out or position <= self._floor:
            return []
        if self._t.stale and _ends(out[-1]):
            self._t.stale = False
            out = [*out[:-1], await self._history.snapshot(self._kept), out[-1]]
        frames = [sse_event(encode(e)) for e in out[:-1]]
        frames.append(sse_event(encode(out[-1]), event_id=position))
        return frames


def _ends(event: BaseEvent) -> bool:
    return isinstance(event, RunFinishedEvent | RunErrorEvent)
