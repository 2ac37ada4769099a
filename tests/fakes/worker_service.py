"""A scripted fake of agent.v1.WorkerService on 127.0.0.1: it records each stream's hello,
welcomes it (a short heartbeat interval keeps tests fast), counts heartbeats, acks results,
records verdicts and questions (asks), and sends what a test queues: tasks, verifies,
answers, or a status that ends the stream.

    async with FakeWorkerService() as fake:
        stream = await fake.stream()           # the next stream, once welcomed
        stream.task("lookup_order", {"order_id": "o-1"})
        result = await stream.result()
        stream.verify("lookup_order", {"order_id": "o-1"})
        verdict = await stream.verdict()
        asked = await stream.ask()
        stream.answer(asked, "accept", {"guests": 2})
        stream.end(grpc.StatusCode.UNAVAILABLE, "server stopping")
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from types import TracebackType
from typing import Any

import grpc
import grpc.aio
from google.protobuf.timestamp_pb2 import Timestamp

from behest._proto.agent.v1 import run_pb2, worker_pb2, worker_pb2_grpc

WAIT_S = 10.0  # no test waits longer for what it expects
_execution_ids = itertools.count(1)


class FakeStream:
    """One Connect stream as the server sees it."""

    def __init__(
        self, hello: worker_pb2.WorkerHello, metadata: dict[str, str], peer: dict[str, Any]
    ) -> None:
        self.hello = hello
        self.metadata = metadata
        self.peer = peer  # the auth context: x509_common_name and the like, with TLS
        self.outgoing: asyncio.Queue[Any] = asyncio.Queue()
        self.results: asyncio.Queue[worker_pb2.WorkerResult] = asyncio.Queue()
        self.verdicts: asyncio.Queue[worker_pb2.WorkerVerdict] = asyncio.Queue()
        self.asks: asyncio.Queue[worker_pb2.WorkerAsk] = asyncio.Queue()
        self.heartbeats = 0
        self.acking = True  # False: results get no ack (as if it were lost)
        self._beats = asyncio.Condition()
        self.half_closed = asyncio.Event()  # the worker closed its side
        self.ended = asyncio.Event()

    def task(self, tool: str, arguments: Any = None, **fields: Any) -> worker_pb2.WorkerTask:
        """Send a task (arguments: JSON text, or a value made JSON); returns it."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        fields.setdefault("execution_id", f"exec-{next(_execution_ids)}")
        fields.setdefault("attempt", 1)
        fields.setdefault("idempotency_key", f"key-{fields['execution_id']}")
        task = worker_pb2.WorkerTask(tool_name=tool, arguments=text, **fields)
        self.outgoing.put_nowait(worker_pb2.WorkerInstruction(task=task))
        return task

    def verify(self, tool: str, arguments: Any = None, **fields: Any) -> worker_pb2.WorkerVerify:
        """Ask whether an execution ran (arguments as for `task`); returns the question."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        fields.setdefault("execution_id", f"exec-{next(_execution_ids)}")
        fields.setdefault("attempt", 1)
        fields.setdefault("idempotency_key", f"key-{fields['execution_id']}")
        verify = worker_pb2.WorkerVerify(tool_name=tool, arguments=text, **fields)
        self.outgoing.put_nowait(worker_pb2.WorkerInstruction(verify=verify))
        return verify

    async def verdict(self) -> worker_pb2.WorkerVerdict:
        """The next verdict the worker sent (no ack answers it, as the server sends none)."""
        return await asyncio.wait_for(self.verdicts.get(), WAIT_S)

    async def ask(self) -> worker_pb2.WorkerAsk:
        """The next question the worker sent."""
        return await asyncio.wait_for(self.asks.get(), WAIT_S)

    def answer(
        self, asked: worker_pb2.WorkerAsk, action: str = "", content: Any = None, error: str = ""
    ) -> None:
        """Answer a question: an action ("accept", "decline", "cancel"; content a value made
        JSON), or an error."""
        actions = {
            "accept": run_pb2.ELICITATION_ACTION_ACCEPT,
            "decline": run_pb2.ELICITATION_ACTION_DECLINE,
            "cancel": run_pb2.ELICITATION_ACTION_CANCEL,
        }
        answer = worker_pb2.WorkerAnswer(
            execution_id=asked.execution_id,
            number=asked.number,
            action=actions.get(action, run_pb2.ELICITATION_ACTION_UNSPECIFIED),
            content=json.dumps(content) if content is not None else "",
            error=error,
        )
        self.outgoing.put_nowait(worker_pb2.WorkerInstruction(answer=answer))

    def end(self, code: grpc.StatusCode, details: str) -> None:
        """End the stream with a status (after what was queued before)."""
        self.outgoing.put_nowait((code, details))

    async def result(self) -> worker_pb2.WorkerResult:
        return await asyncio.wait_for(self.results.get(), WAIT_S)

    async def heartbeats_past(self, count: int) -> None:
        """Wait until more than `count` heartbeats came on this stream."""
        async with asyncio.timeout(WAIT_S), self._beats:
            await self._beats.wait_for(lambda: self.heartbeats > count)

    async def beat(self) -> None:
        async with self._beats:
            self.heartbeats += 1
            self._beats.notify_all()


def deadline_in(seconds: float) -> Timestamp:
    stamp = Timestamp()
    stamp.GetCurrentTime()
    stamp.FromNanoseconds(stamp.ToNanoseconds() + int(seconds * 1e9))
    return stamp


class FakeWorkerService(worker_pb2_grpc.WorkerServiceServicer):
    """The fake server; `refusals` end the next hellos with a status instead of a welcome,
    `cuts` end the next streams with a status right after their welcome, `verdict` decides
    each ack (default: accepted)."""

    def __init__(
        self,
        heartbeat_interval_s: float = 0.05,
        *,
        tls: grpc.ServerCredentials | None = None,
    ) -> None:
        self.heartbeat_interval_s = heartbeat_interval_s
        self._tls = tls
        self.streams: list[FakeStream] = []
        self.refusals: list[tuple[grpc.StatusCode, str]] = []
        self.cuts: list[tuple[grpc.StatusCode, str]] = []
        self.verdict: Callable[[worker_pb2.WorkerResult], tuple[bool, str]] = lambda r: (True, "")
        self.hellos = 0
        self._welcomed: asyncio.Queue[FakeStream] = asyncio.Queue()
        self._server: grpc.aio.Server | None = None
        self.address = ""

    async def __aenter__(self) -> FakeWorkerService:
        self._server = grpc.aio.server()
        worker_pb2_grpc.add_WorkerServiceServicer_to_server(self, self._server)
        if self._tls is None:
            port = self._server.add_insecure_port("127.0.0.1:0")
        else:
            port = self._server.add_secure_port("127.0.0.1:0", self._tls)
        await self._server.start()
        self.address = f"127.0.0.1:{port}"
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        await self._server.stop(None)

    async def stream(self) -> FakeStream:
        """The next stream welcomed."""
        return await asyncio.wait_for(self._welcomed.get(), WAIT_S)

    async def Connect(self, request_iterator: Any, context: Any) -> None:
        first = await context.read()
        if first is grpc.aio.EOF:
            return
        self.hellos += 1
        metadata = {key: value for key, value in context.invocation_metadata()}
        peer = {key: [v.decode() for v in values] for key, values in context.auth_context().items()}
        stream = FakeStream(first.hello, metadata, peer)
        self.streams.append(stream)
        if self.refusals:
            await context.abort(*self.refusals.pop(0))
        welcome = worker_pb2.WorkerWelcome(
            worker_id=f"w-{len(self.streams)}", heartbeat_interval_s=self.heartbeat_interval_s
        )
        await context.write(worker_pb2.WorkerInstruction(welcome=welcome))
        self._welcomed.put_nowait(stream)
        if self.cuts:
            await context.abort(*self.cuts.pop(0))
        reader = asyncio.create_task(self._read(stream, context))
        try:
            while (item := await stream.outgoing.get()) is not None:
                if isinstance(item, tuple):
                    await context.abort(*item)
                await context.write(item)
        finally:
            reader.cancel()
            stream.ended.set()

    async def _read(self, stream: FakeStream, context: Any) -> None:
        while (message := await context.read()) is not grpc.aio.EOF:
            kind = message.WhichOneof("message")
            if kind == "heartbeat":
                await stream.beat()
            elif kind == "verdict":
                stream.verdicts.put_nowait(message.verdict)
            elif kind == "ask":
                stream.asks.put_nowait(message.ask)
            elif kind == "result":
                stream.results.put_nowait(message.result)
                if not stream.acking:
                    continue
                accepted, reason = self.verdict(message.result)
                ack = worker_pb2.WorkerResultAck(
                    execution_id=message.result.execution_id,
                    attempt=message.result.attempt,
                    accepted=accepted,
                    reason=reason,
                )
                stream.outgoing.put_nowait(worker_pb2.WorkerInstruction(ack=ack))
        stream.half_closed.set()
        stream.outgoing.put_nowait(None)  # the worker is done: end the stream, OK
