"""One Connect stream, from hello to its end: the welcome awaited, then at once the server's
instructions read (tasks started, acks taken, verifies checked, answers handed to the tasks
that asked), heartbeats sent twice per interval, results sent as they are made, the tasks'
questions as they ask them (and again on each new stream until answered), and verdicts as
their checks give them (on this stream only: one that breaks first is not sent; the server
asks again if it needs to); once the worker stops and nothing is left in hand, the stream is
half-closed from this side and the server's end awaited. Any other end raises StreamEnded
with the status it ended with."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any, NoReturn

import grpc
import grpc.aio

from behest.worker import _wire
from behest.worker._checks import Checks
from behest.worker._context import TaskContext
from behest.worker._tasks import Tasks

log = logging.getLogger("behest.worker")

WELCOME_TIMEOUT_S = 30.0  # a server that says nothing to a hello for this long: a break
ACK_WAIT_S = 10.0  # while stopping: how long the last results' acks are waited for
_CLOSE_WAIT_S = 2.0  # after the half-close: how long the server's end is waited for
_DEFAULT_HEARTBEAT_S = 5.0  # a welcome without an interval


class StreamEnded(Exception):
    """The stream ended other than by this side closing it: its status, and whether it lasted
    (welcomed, and up for a heartbeat interval at least): a break after a stream that lasted
    starts a new outage; one welcomed and cut at once counts as another failed attempt."""

    def __init__(self, code: grpc.StatusCode, details: str, *, lasted: bool) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.lasted = lasted


class Stream:
    """One stream of a serving worker; `run` returns once the worker has stopped."""

    def __init__(
        self,
        address: str,
        open_call: Callable[[], Any],
        hello: Any,
        tasks: Tasks,
        checks: Checks,
        number: int,
        stopping: asyncio.Event,
    ) -> None:
        self._address = address
        self._open_call = open_call
        self._hello = hello
        self._tasks = tasks
        self._checks = checks
        self._checking: set[asyncio.Task[None]] = set()  # verifies being answered
        self._number = number
        self._stopping = stopping
        self._lock = asyncio.Lock()  # one write at a time
        self._up_since: float | None = None  # the loop's time of the welcome
        self._interval = _DEFAULT_HEARTBEAT_S
        self._closing = False  # half-closed by this side: nothing more is written
        self._call: Any = None

    async def run(self) -> None:
        self._call = self._open_call()
        try:
            welcome = await self._open()
            await self._serve(welcome)
        except grpc.aio.AioRpcError as exc:
            raise StreamEnded(exc.code(), exc.details() or "", lasted=self._lasted()) from None
        finally:
            self._call.cancel()

    async def _open(self) -> _wire.Welcome:
        await self._write(self._hello)
        try:
            first = await asyncio.wait_for(self._call.read(), WELCOME_TIMEOUT_S)
        except TimeoutError:
            raise StreamEnded(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no welcome within {WELCOME_TIMEOUT_S:g} s of the hello",
                lasted=False,
            ) from None
        if first is grpc.aio.EOF:
            await self._ended()
        welcome = _wire.instruction(first)
        if not isinstance(welcome, _wire.Welcome):
            raise StreamEnded(
                grpc.StatusCode.UNKNOWN, "the server's first message is not a welcome",
                lasted=False,
            )  # fmt: skip
        self._up_since = asyncio.get_running_loop().time()
        if welcome.heartbeat_interval_s > 0:
            self._interval = welcome.heartbeat_interval_s
        return welcome

    async def _serve(self, welcome: _wire.Welcome) -> None:
        interval = self._interval
        log.info("connected to %s as worker %s; heartbeat every %g s", self._address,
                 welcome.worker_id, interval)  # fmt: skip
        reader = asyncio.create_task(self._read(welcome.worker_id))
        helpers = [
            asyncio.create_task(self._beat(interval)),
            asyncio.create_task(self._send()),
            asyncio.create_task(self._ask()),
        ]
        drain = asyncio.create_task(self._drain())
        jobs = [reader, *helpers, drain]
        try:
            done, _ = await asyncio.wait(jobs, return_when=asyncio.FIRST_COMPLETED)
            if drain in done and drain.exception() is None:
                # Half-closed: the server ends the stream, and the reader sees it end. (A
                # cancelled read would cancel the call.)
                for job in helpers:
                    job.cancel()
                await asyncio.wait([reader], timeout=_CLOSE_WAIT_S)
                return
        finally:
            ending = [*jobs, *self._checking]  # a verdict not sent by now never is
            for job in ending:
                job.cancel()
            await asyncio.gather(*ending, return_exceptions=True)
        for job in done:
            job.result()  # a break raises here

    async def _read(self, worker_id: str) -> None:
        while True:
            message = await self._call.read()
            if message is grpc.aio.EOF:
                if self._closing:
                    return
                await self._ended()
            instruction = _wire.instruction(message)
            if isinstance(instruction, _wire.Task):
                self._tasks.take(instruction, worker_id)
            elif isinstance(instruction, _wire.Ack):
                await self._tasks.acknowledged(instruction)
            elif isinstance(instruction, _wire.Answer):
                self._tasks.questions.answered(instruction)
            elif isinstance(instruction, _wire.Verify):
                context = dataclasses.replace(instruction.context, worker_id=worker_id)
                job = asyncio.create_task(
                    self._answer(context, instruction.arguments),
                    name=f"behest.worker verify {context.execution_id}",
                )
                self._checking.add(job)
                job.add_done_callback(self._checking.discard)

    async def _answer(self, context: TaskContext, arguments: str) -> None:
        """A verify's check run and its verdict sent on this stream (if it is still up)."""
        key = (context.execution_id, context.attempt)
        log.debug("verify %s: %s (attempt %d)", key[0], context.tool_name, key[1])
        verdict = await self._checks.verdict(context, arguments)
        try:
            await self._write(_wire.verdict(*key, verdict))
        except (StreamEnded, grpc.aio.AioRpcError):
            log.info("verdict on %s (attempt %d) not sent: the stream ended", *key)
            return
        log.debug("verdict on %s (attempt %d) sent", *key)

    async def _beat(self, interval: float) -> None:
        # Twice per interval: a beat a little late (a busy loop) still lands in time.
        while True:
            await asyncio.sleep(interval / 2)
            await self._write(_wire.HEARTBEAT)

    async def _send(self) -> None:
        while True:
            for (execution_id, attempt), outcome in await self._tasks.results_for(self._number):
                await self._write(_wire.result(execution_id, attempt, outcome))
                log.debug("result of %s (attempt %d) sent", execution_id, attempt)

    async def _ask(self) -> None:
        questions = self._tasks.questions
        while True:
            for (execution_id, number), asked in await questions.to_send(self._number):
                await self._write(_wire.ask(execution_id, number, asked.message, asked.schema))
                log.debug("question %d of %s sent", number, execution_id)

    async def _drain(self) -> None:
        """Once the worker stops, nothing runs and the last acks came (or not in time):
        half-close the stream; nothing is written on it after."""
        await self._stopping.wait()
        await self._write(_wire.DRAIN)  # no more tasks; those in hand go on
        await self._tasks.finished()  # their results go out as they finish (_send)
        try:
            await asyncio.wait_for(self._tasks.settled(), ACK_WAIT_S)
        except TimeoutError:
            left = ", ".join(f"{e} (attempt {a})" for e, a in self._tasks.unacknowledged())
            log.warning("stopping without the server's ack of: %s", left)
        async with self._lock:
            self._closing = True
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                await self._call.done_writing()

    async def _write(self, message: Any) -> None:
        async with self._lock:
            if self._closing:
                return
            try:
                await self._call.write(message)
            except asyncio.InvalidStateError:  # the call ended: say how
                await self._ended()

    async def _ended(self) -> NoReturn:
        code = await self._call.code()
        details = await self._call.details() or "the server ended the stream"
        raise StreamEnded(code, details, lasted=self._lasted())

    def _lasted(self) -> bool:
        up = self._up_since
        return up is not None and asyncio.get_running_loop().time() - up >= self._interval
