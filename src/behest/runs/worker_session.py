"""One worker's connection, served: tasks sent while it has room, heartbeats, results handed
in and acknowledged, its tasks' questions stored and answered (runs/worker_asks.py), until the
worker hangs up or this replica stops.

The edge (api/worker_service.py) gives the worker's messages as WorkerHeartbeat, WorkerDrain,
TaskResult, WorkerVerdict and TaskQuestion, and sends back what this yields: Task (to run),
ResultAck, VerifyRequest and TaskAnswer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from behest import bounded_json
from behest.domain.workers import (
    Task,
    TaskAnswer,
    TaskQuestion,
    TaskResult,
    VerifyRequest,
    WorkerRecord,
    WorkerVerdict,
)
from behest.errors import Unavailable
from behest.runs.worker_hub import WorkerHub
from behest.tools.registry import ToolRegistry

# The most a task's output may be (a larger one is refused: the worker may send another).
MAX_OUTPUT_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class WorkerHeartbeat:
    pass


@dataclass(frozen=True, slots=True)
class WorkerDrain:
    """The worker stops: no more tasks for it."""


@dataclass(frozen=True, slots=True)
class ResultAck:
    execution_id: str
    attempt: int
    accepted: bool
    reason: str = ""


_END = object()
Incoming = WorkerHeartbeat | WorkerDrain | TaskResult | WorkerVerdict | TaskQuestion
Outgoing = Task | ResultAck | VerifyRequest | TaskAnswer


class WorkerSession:
    """Serves one connected worker."""

    def __init__(self, hub: WorkerHub, worker: WorkerRecord) -> None:
        self._hub = hub
        self.worker = worker
        self._room = asyncio.Semaphore(worker.max_tasks)
        self._in_hand: dict[str, str] = {}  # execution id → tool name, of tasks sent
        self._specs = {spec.name: spec for spec in worker.tools}
        self._out: asyncio.Queue[object] | None = None
        self._verdicts: dict[str, asyncio.Future[WorkerVerdict]] = {}
        # Questions of its tasks waiting here for their answers, by execution id and number,
        # and the jobs that wait for them.
        self._asking: dict[tuple[str, int], TaskQuestion] = {}
        self._questions: set[asyncio.Task[None]] = set()

    def verifies(self, tool_name: str) -> bool:
        spec = self._specs.get(tool_name)
        return self._out is not None and spec is not None and spec.verifiable

    async def verify(self, request: VerifyRequest, timeout_s: float) -> WorkerVerdict | None:
        """Ask the worker whether an execution ran; None if it does not answer in time."""
        if self._out is None:
            return None
        answer = self._verdicts[request.execution_id] = asyncio.get_running_loop().create_future()
        await self._out.put(request)
        try:
            return await asyncio.wait_for(answer, timeout_s)
        except TimeoutError:
            return None
        finally:
            self._verdicts.pop(request.execution_id, None)

    async def serve(self, incoming: AsyncIterator[Incoming]) -> AsyncIterator[Outgoing]:
        """What to send the worker, as its messages come in; ends when it hangs up.
        Raises Unavailable when this replica stops."""
        out: asyncio.Queue[object] = asyncio.Queue()
        self._out = out
        self._hub.serving(self)
        dispatcher = asyncio.create_task(self._dispatch(out))
        reader = asyncio.create_task(self._read(incoming, out, dispatcher))
        stop = asyncio.create_task(self._hub.stopping.wait())
        try:
            while True:
                getting = asyncio.create_task(out.get())
                done, _ = await asyncio.wait(
                    {getting, reader, stop}, return_when=asyncio.FIRST_COMPLETED
                )
                if getting not in done:
                    getting.cancel()
                if stop in done:
                    raise Unavailable("behest is stopping here: reconnect (to another replica)")
                if reader in done and getting not in done:
                    reader.result()  # the worker's message that was refused, or its hang-up
                    return
                item = getting.result()
                if item is _END:
                    return
                if isinstance(item, Exception):
                    raise item
                assert isinstance(item, Outgoing)
                # A task yielded counts as sent: if the stream broke as it went, its lease
                # lapses and its run decides (an idempotent call runs again).
                yield item
        finally:
            self._out = None
            self._hub.served(self)
            jobs = [reader, dispatcher, stop, *self._questions]
            for job in jobs:
                job.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*jobs, return_exceptions=True)
            await self._end(out)

    async def _end(self, out: asyncio.Queue[object]) -> None:
        """Queue again the tasks taken but never sent; the connection is gone."""
        pending = []
        while not out.empty():
            item = out.get_nowait()
            if isinstance(item, Task):
                pending.append(item)
        for task in pending:
            await self._hub.release(self.worker, task.execution_id)
        await self._hub.disconnect(self.worker)

    async def _read(
        self,
        incoming: AsyncIterator[Incoming],
        out: asyncio.Queue[object],
        dispatcher: asyncio.Task[None],
    ) -> None:
        renewed = 0.0
        every = self._hub.settings.heartbeat_s / 3
        async for message in incoming:
            # Any message says the worker is alive; its leases are renewed at most every
            # third of a heartbeat interval (a busy worker's results do not each write one).
            if isinstance(message, WorkerHeartbeat) or time.monotonic() - renewed >= every:
                await self._hub.heartbeat(self.worker)
                renewed = time.monotonic()
            if isinstance(message, TaskResult):
                await out.put(await self._hand_in(message))
            elif isinstance(message, WorkerDrain):
                dispatcher.cancel()
            elif isinstance(message, WorkerVerdict):
                waiting = self._verdicts.get(message.execution_id)
                if waiting is not None and not waiting.done():
                    waiting.set_result(message)
            elif isinstance(message, TaskQuestion):
                self._ask(message, out)
        await out.put(_END)

    def _ask(self, question: TaskQuestion, out: asyncio.Queue[object]) -> None:
        """Store a task's question and send its answer once it has one (the same question
        asked again while it waits here gets that one answer)."""
        key = (question.execution_id, question.number)
        if self._asking.get(key) == question:
            return
        self._asking.setdefault(key, question)

        async def answer() -> None:
            try:
                answered: TaskAnswer | Exception = await self._hub.asks.ask(self.worker, question)
            except Exception as exc:  # the store failed: so does the stream (as for a result)
                answered = exc
            finally:
                if self._asking.get(key) is question:
                    del self._asking[key]
            await out.put(answered)

        job = asyncio.create_task(answer())
        self._questions.add(job)
        job.add_done_callback(self._questions.discard)

    async def _dispatch(self, out: asyncio.Queue[object]) -> None:
        while True:
            await self._room.acquire()
            task = await self._hub.next_task(self.worker)
            self._in_hand[task.execution_id] = task.tool_name
            await out.put(task)

    async def _hand_in(self, result: TaskResult) -> ResultAck:
        """A result, checked (size, the tool's output schema) and handed in."""
        ack = ResultAck(result.execution_id, result.attempt, accepted=True)
        if len(result.output.encode("utf-8", "surrogatepass")) > MAX_OUTPUT_BYTES:
            why = f"the output is over {MAX_OUTPUT_BYTES} bytes: send a shorter one, or an error"
            return replace(ack, accepted=False, reason=why)
        problem = self._off_schema(result, self._in_hand.get(result.execution_id, ""))
        if problem:
            result = replace(result, output=problem, is_error=True, retryable=False)
            ack = replace(ack, reason=f"taken as an error: {problem}")
        refused = await self._hub.hand_in(self.worker, result)
        if refused is not None:
            return replace(ack, accepted=False, reason=refused.value)
        if self._in_hand.pop(result.execution_id, None) is not None:
            self._room.release()
        return ack

    def _off_schema(self, result: TaskResult, tool_name: str) -> str:
        """Why a result breaks its tool's output schema ("" when it fits, or has none; a task
        taken over from an earlier connection is not checked: its tool is not known here)."""
        spec = self._specs.get(tool_name)
        if spec is None or spec.output_schema is None or result.is_error:
            return ""
        try:
            value = bounded_json.parse(result.output, max_bytes=MAX_OUTPUT_BYTES)
        except bounded_json.JsonRefused as exc:
            return f"the output of {spec.name!r} is not the JSON its output schema asks for: {exc}"
        return ToolRegistry.check_value(f"the output of {spec.name!r}", value, spec.output_schema)
