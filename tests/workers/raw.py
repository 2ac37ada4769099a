"""A worker written against the wire alone (agent.v1.WorkerService), as one in another
language would be: for tests that need to say exactly what a worker sends, and when."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from behest._proto.agent.v1 import worker_pb2 as w
from behest._proto.agent.v1 import worker_pb2_grpc as w_rpc

LOOKUP = w.WorkerToolSpec(
    name="lookup_order",
    description="Look an order up by its id.",
    parameters_schema=json.dumps(
        {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
    ),
    idempotent=True,
)
# A tool whose tasks ask the run's user how many guests (WorkerAsk), and its question's schema.
BOOK = w.WorkerToolSpec(
    name="book_table",
    description="Book a table in a city.",
    parameters_schema=json.dumps(
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    ),
    timeout_s=60,
)
GUESTS = {
    "type": "object",
    "properties": {"guests": {"type": "integer", "minimum": 1}},
    "required": ["guests"],
}


class RawWorker:
    """One Connect stream: send what a test says; read the server's instructions."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        tools: Sequence[w.WorkerToolSpec] = (LOOKUP,),
        *,
        name: str = "raw",
        max_tasks: int = 1,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> None:
        self._outbox: asyncio.Queue[w.WorkerMessage | None] = asyncio.Queue()
        self._beats: asyncio.Task[None] | None = None
        hello = w.WorkerHello(name=name, tools=list(tools), max_tasks=max_tasks)
        self._outbox.put_nowait(w.WorkerMessage(hello=hello))
        self.call = w_rpc.WorkerServiceStub(channel).Connect(self._sent(), metadata=metadata)

    async def _sent(self) -> AsyncIterator[w.WorkerMessage]:
        while (message := await self._outbox.get()) is not None:
            yield message

    async def welcome(self) -> w.WorkerWelcome:
        """The server's welcome; from then on it sends heartbeats, as a worker must (a
        third of the interval apart), until it is closed."""
        first = await self.call.read()
        assert first != grpc.aio.EOF and first.WhichOneof("instruction") == "welcome", first
        self._beats = asyncio.create_task(self._beat(first.welcome.heartbeat_interval_s / 3))
        return first.welcome

    async def _beat(self, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)  # a heartbeat's own schedule, not a test's wait
            await self.heartbeat()

    async def next(self) -> Any:
        """The next task, ack, verify or answer."""
        instruction = await self.call.read()
        assert instruction != grpc.aio.EOF, "the server ended the stream"
        return getattr(instruction, instruction.WhichOneof("instruction"))

    async def heartbeat(self) -> None:
        await self._outbox.put(w.WorkerMessage(heartbeat=w.WorkerHeartbeat()))

    async def send(self, task: Any, output: str, **fields: Any) -> None:
        """Send a result of `task` (execution id and attempt taken from it)."""
        fields = {"execution_id": task.execution_id, "attempt": task.attempt, **fields}
        result = w.WorkerResult(output=output, **fields)
        await self._outbox.put(w.WorkerMessage(result=result))

    async def result(self, task: Any, output: str, **fields: Any) -> w.WorkerResultAck:
        """Send a result of `task` and read its ack."""
        await self.send(task, output, **fields)
        ack = await self.next()
        assert isinstance(ack, w.WorkerResultAck), ack
        return ack

    async def verdict(self, asked: Any, **fields: Any) -> None:
        """Answer a verify (execution id and attempt taken from it)."""
        verdict = w.WorkerVerdict(execution_id=asked.execution_id, attempt=asked.attempt, **fields)
        await self._outbox.put(w.WorkerMessage(verdict=verdict))

    async def ask(self, task: Any, number: int, message: str, schema: dict[str, Any] | str) -> None:
        """Ask the run's user a question for `task` (its execution id taken from it)."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        asked = w.WorkerAsk(
            execution_id=task.execution_id, number=number, message=message, requested_schema=text
        )
        await self._outbox.put(w.WorkerMessage(ask=asked))

    async def close(self) -> None:
        if self._beats is not None:
            self._beats.cancel()
        await self._outbox.put(None)
        self.call.cancel()
