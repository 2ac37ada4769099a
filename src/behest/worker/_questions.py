"""The questions the running tasks ask the run's user (`TaskContext.ask`), across streams:
each numbered within its task, sent on every stream until its answer comes (the server takes
a question asked again as the same one, and never puts it to the user twice), and its answer
handed back to the task."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from behest.worker._context import ElicitAction, Reply, TaskContext
from behest.worker._wire import Answer

Key = tuple[str, int]  # (execution id, question number)


@dataclass(slots=True)
class Open:
    """A question waiting for its answer: as sent, and the stream it was last sent on."""

    message: str
    schema: str  # JSON text
    answer: asyncio.Future[Answer]
    sent_on: int = 0


class Questions:
    """The open questions of the tasks running here; the streams send them and answer them."""

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}  # by execution id: questions asked so far
        self._open: dict[Key, Open] = {}
        self._changed = asyncio.Condition()

    async def ask(self, context: TaskContext, message: str, schema: dict[str, Any]) -> Reply:
        """Ask the server (TaskContext.ask) and wait for the answer."""
        if not isinstance(message, str):
            raise TypeError(f"a question's message is text, not {type(message).__name__}")
        if not isinstance(schema, dict):
            raise TypeError(f"a question's schema is a dict, not {type(schema).__name__}")
        try:
            text = json.dumps(schema, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the question's schema cannot be written as JSON: {exc}") from None
        execution_id = context.execution_id
        number = self._numbers[execution_id] = self._numbers.get(execution_id, 0) + 1
        key = (execution_id, number)
        waiting = Open(message, text, asyncio.get_running_loop().create_future())
        async with self._changed:
            self._open[key] = waiting
            self._changed.notify_all()
        try:
            answer = await waiting.answer
        finally:
            self._open.pop(key, None)
        if answer.error or not answer.action:
            raise ValueError(answer.error or "the server's answer says nothing")
        action = ElicitAction(answer.action)
        if action != ElicitAction.ACCEPT:
            return Reply(action)
        return Reply(action, json.loads(answer.content or "{}"))

    def ended(self, execution_id: str) -> None:
        """The task ended: its numbering with it."""
        self._numbers.pop(execution_id, None)

    async def to_send(self, stream: int) -> list[tuple[Key, Open]]:
        """Wait for questions not yet sent on `stream`, and take them (marked sent on it)."""
        async with self._changed:
            await self._changed.wait_for(
                lambda: any(o.sent_on != stream for o in self._open.values())
            )
            found = []
            for key, waiting in self._open.items():
                if waiting.sent_on != stream:
                    waiting.sent_on = stream
                    found.append((key, waiting))
            return found

    def answered(self, answer: Answer) -> None:
        """The server's answer to a question (one no longer open is dropped)."""
        waiting = self._open.get((answer.execution_id, answer.number))
        if waiting is not None and not waiting.answer.done():
            waiting.answer.set_result(answer)
