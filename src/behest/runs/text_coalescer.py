"""Joins the text deltas that arrive while the run's previous text delta is being committed.

A model that streams faster than the event log commits would otherwise cost one event (a row,
and a wire message per reader) per token, and fall further behind the more it is loaded. The
joined delta carries exactly the text of the deltas it replaces, in order; only the number of
TextDelta events differs. Text is held only while the previous text delta is uncommitted, so
it is never shown later than it could have been.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from behest.domain import events as ev
from behest.events.run_log import RunLog


class TextCoalescer:
    """Emits a run's text deltas, joining those that wait for the previous one's commit.

    `flush` before any other event of the run keeps the order; `discard` when the model call
    is cancelled stops the background emit, so nothing follows the run's end. `event` makes
    the event of a joined piece: TextDelta, or ReasoningDelta for the model's reasoning.
    """

    def __init__(
        self,
        log: RunLog,
        *,
        enabled: bool,
        event: Callable[[str], ev.TextDelta | ev.ReasoningDelta] = ev.TextDelta,
    ) -> None:
        self._log = log
        self._enabled = enabled
        self._event = event
        self._pending: list[str] = []
        self._committing: asyncio.Future[None] | None = None
        # Emits the pending text once the previous delta has committed.
        self._flusher: asyncio.Task[None] | None = None
        # Why the flusher could not emit (a step not stored): raised by the next add/flush.
        self._error: BaseException | None = None

    async def add(self, chunk: str) -> None:
        self._raise_error()
        if self._enabled and (self._pending or self._is_committing()):
            self._pending.append(chunk)
            if self._flusher is None:
                self._flusher = asyncio.create_task(self._flush_once_committed())
            return
        self._committing = await self._log.emit(self._event(chunk))

    async def flush(self) -> None:
        """Emit the pending text now."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None and not flusher.done():
            if self._is_committing():
                flusher.cancel()  # still waiting for the commit: it has emitted nothing
            else:
                await flusher  # it is emitting the pending text, or about to
        self._raise_error()
        await self._emit_pending()

    def discard(self) -> None:
        """Drop the pending text and stop waiting to emit it (the call is being cancelled)."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.cancel()
        self._pending.clear()

    def _is_committing(self) -> bool:
        return self._committing is not None and not self._committing.done()

    async def _flush_once_committed(self) -> None:
        if self._committing is not None:
            await asyncio.wait([self._committing])
        self._flusher = None
        try:
            await self._emit_pending()
        except Exception as exc:  # the run's next add or flush raises it
            self._error = exc

    def _raise_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    async def _emit_pending(self) -> None:
        if self._pending:
            text = "".join(self._pending)
            self._pending.clear()
            self._committing = await self._log.emit(self._event(text))
