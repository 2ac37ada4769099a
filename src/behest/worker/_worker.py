"""Worker: tools declared with `@worker.tool`, served over WorkerService/Connect.

`serve()` keeps one stream open at a time (_stream.py): a stream that breaks is opened again
after behest's backoff (full jitter, capped), and the tasks in hand run on across it
(_tasks.py). A refusal (a bad hello, a bad token, a missing role) ends `serve()` with a
WorkerError: trying again would not change it. `stop()` stops taking tasks, lets those in hand
finish and send their results, then closes; `run()` is `serve()` in its own event loop, with
SIGTERM and SIGINT calling `stop()` (a second signal stops at once).

Credentials are BehestClient's: `token` as `authorization: Bearer` metadata, `tls_ca` for TLS,
`tls_cert` with `tls_key` for mTLS. The token is never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import grpc
import grpc.aio

from behest.backoff import backoff_s
from behest.client._channel import FilePath, authorization, credentials
from behest.worker import _wire
from behest.worker._checks import Checks
from behest.worker._context import WorkerError
from behest.worker._stream import Stream, StreamEnded
from behest.worker._tasks import Tasks
from behest.worker._tools import WorkerTool, declare

log = logging.getLogger("behest.worker")
F = TypeVar("F", bound=Callable[..., Any])

# Statuses that another attempt would only meet again: serve() raises WorkerError.
_REFUSALS = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.NOT_FOUND,
    }
)


@dataclass(slots=True)
class _Serving:
    """One serve(): its channel, the tasks in hand, the checks, and whether it stops."""

    channel: grpc.aio.Channel
    tasks: Tasks
    checks: Checks
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    main: asyncio.Task[None] | None = None
    forced: bool = False


class Worker:
    """A process that serves tools to behest's runs: `@worker.tool` each, then `worker.run()`.

    `max_tasks` tasks run at once at most (the server is told, and never sends more). A
    broken stream is reopened after a backoff from `reconnect_backoff_s` doubling up to
    `reconnect_backoff_max_s`, `reconnect_attempts` times in a row at most (None: forever).
    An unreadable TLS file raises OSError; a token gRPC cannot send, ValueError.
    """

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        name: str = "",
        max_tasks: int = 4,
        metadata: Sequence[tuple[str, str]] = (),
        tls_ca: FilePath | None = None,
        tls_cert: FilePath | None = None,
        tls_key: FilePath | None = None,
        reconnect_backoff_s: float = 0.2,
        reconnect_backoff_max_s: float = 10.0,
        reconnect_attempts: int | None = None,
    ) -> None:
        if max_tasks < 1:
            raise ValueError("max_tasks must be at least 1")
        self.address = address
        # A name is the worker's identity to the server (a reconnection under it takes over
        # its tasks): one of its own per process.
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.max_tasks = max_tasks
        self.metadata = tuple(metadata)
        self._token = ""
        self._credentials: grpc.ChannelCredentials | None = None
        self.configure(token=token or "", tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key)
        self._backoff = (reconnect_backoff_s, reconnect_backoff_max_s)
        self._attempts = reconnect_attempts
        self._tools: dict[str, WorkerTool] = {}
        self._serving: _Serving | None = None

    def configure(
        self,
        *,
        address: str | None = None,
        token: str | None = None,
        tls_ca: FilePath | None = None,
        tls_cert: FilePath | None = None,
        tls_key: FilePath | None = None,
    ) -> None:
        """Change where and how the worker connects (what is None stays as it was), for the
        next serve(). TLS files given replace all three of the worker's."""
        if token is not None:
            if token and any(key.lower() == "authorization" for key, _ in self.metadata):
                raise ValueError("give the token as `token` or in `metadata`, not both")
            authorization(token)  # refuses a token gRPC cannot send, without echoing it
            self._token = token
        if any(path is not None for path in (tls_ca, tls_cert, tls_key)):
            self._credentials = credentials(tls_ca, tls_cert, tls_key)
        if address is not None:
            self.address = address

    @property
    def sends_token(self) -> bool:
        """Whether each stream carries a bearer token."""
        return bool(self._token.strip()) or any(
            key.lower() == "authorization" for key, _ in self.metadata
        )

    @property
    def uses_tls(self) -> bool:
        """Whether the channel is TLS (a CA or a client certificate was given)."""
        return self._credentials is not None

    @property
    def tools(self) -> Mapping[str, WorkerTool]:
        """The tools declared so far, by name (what the hello declares)."""
        return types.MappingProxyType(self._tools)

    @overload
    def tool(self, function: F, /) -> F: ...

    @overload
    def tool(
        self,
        function: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = False,
        read_only: bool = False,
        concurrency_safe: bool = False,
        requires_approval: bool = False,
        timeout_s: float = 30.0,
        schedule_timeout_s: float = 60.0,
        max_attempts: int = 1,
        output_schema: Mapping[str, Any] | type | None = None,
        verify: Callable[..., Any] | None = None,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        function: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = False,
        read_only: bool = False,
        concurrency_safe: bool = False,
        requires_approval: bool = False,
        timeout_s: float = 30.0,
        schedule_timeout_s: float = 60.0,
        max_attempts: int = 1,
        output_schema: Mapping[str, Any] | type | None = None,
        verify: Callable[..., Any] | None = None,
    ) -> Any:
        """Declare a function (sync or async) as a tool; used as `@worker.tool` or
        `@worker.tool(...)`, it returns the function unchanged. The parameters' JSON Schema
        comes from their type hints, the description from the docstring (or `description`);
        a parameter named `context` or annotated TaskContext gets the task's context and is
        not in the schema. The flags and limits are WorkerToolSpec's (worker.proto).

        `verify` is the tool's check (sync or async) of an execution whose outcome the server
        does not know: it takes the tool's parameters (all or some, by name; checked as for a
        call) and the context as a tool does, and returns True or a Verified (it ran), False
        (it did not) or None (cannot tell). The hello declares the tool verifiable.
        """

        def add(function: F) -> F:
            declared = declare(
                function,
                name=name,
                description=description,
                output_schema=output_schema,
                verify=verify,
                idempotent=idempotent,
                read_only=read_only,
                concurrency_safe=concurrency_safe,
                requires_approval=requires_approval,
                timeout_s=timeout_s,
                schedule_timeout_s=schedule_timeout_s,
                max_attempts=max_attempts,
            )
            if declared.name in self._tools:
                raise ValueError(f"this worker has a tool named {declared.name!r} already")
            self._tools[declared.name] = declared
            return function

        return add if function is None else add(function)

    async def serve(self) -> None:
        """Serve the tools until `stop()` (it returns) or a refusal (WorkerError); cancelled,
        it stops at once, the results of tasks in hand unsent."""
        if self._serving is not None:
            raise RuntimeError("this worker is serving already")
        if not self._tools:
            raise ValueError("the worker has no tools: declare some with @worker.tool")
        serving = _Serving(
            channel=self._channel(),
            tasks=Tasks(self.tools, self.max_tasks),
            checks=Checks(self.tools, self.max_tasks),
        )
        self._serving = serving
        serving.main = asyncio.create_task(self._keep_connected(serving))
        try:
            await serving.main
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not serving.forced or (current is not None and current.cancelling()):
                raise
        finally:
            self._serving = None
            await serving.tasks.cancel()
            await serving.channel.close()
        log.info("stopped")

    def stop(self, *, drain: bool = True) -> None:
        """Stop serving: take no more tasks, finish those in hand and send their results, then
        close (serve() returns). With drain=False, at once: tasks in hand are cancelled and
        their results not sent. Call it in serve()'s event loop; not serving, it does nothing.
        """
        serving = self._serving
        if serving is None:
            return
        if not serving.stopping.is_set():
            log.info("stopping; tasks running, to finish first: %d", serving.tasks.running)
        serving.tasks.taking = False
        serving.stopping.set()
        if not drain and serving.main is not None:
            serving.forced = True
            serving.main.cancel()

    def run(self) -> None:
        """serve() in a new event loop until SIGTERM or SIGINT (stop(); a second one: at once)."""
        asyncio.run(self._serve_with_signals())

    async def _serve_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        handled = []
        for number in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(number, self._signalled, number)
                handled.append(number)
            except (NotImplementedError, RuntimeError):  # not on this platform or thread
                pass
        try:
            await self.serve()
        finally:
            for number in handled:
                loop.remove_signal_handler(number)

    def _signalled(self, number: signal.Signals) -> None:
        serving = self._serving
        if serving is not None and serving.stopping.is_set():
            log.warning("%s again: stopping now", number.name)
            self.stop(drain=False)
        else:
            log.info("%s: stopping", number.name)
            self.stop()

    async def _keep_connected(self, serving: _Serving) -> None:
        """Streams, one after another, until one is closed by a stop (or a refusal)."""
        failures, number = 0, 0
        while not (serving.stopping.is_set() and serving.tasks.idle()):
            number += 1
            stream = Stream(
                self.address,
                lambda: _wire.connect(serving.channel, self._call_metadata()),
                _wire.hello(self.name, self._tools.values(), self.max_tasks),
                serving.tasks,
                serving.checks,
                number,
                serving.stopping,
            )
            try:
                await stream.run()
                return
            except StreamEnded as ended:
                failures = 1 if ended.lasted else failures + 1
                if not await self._after_break(serving, ended, failures):
                    return

    async def _after_break(self, serving: _Serving, ended: StreamEnded, failures: int) -> bool:
        """Whether to open another stream (after the backoff's wait): not when stopping with
        nothing in hand; WorkerError for a refusal, or once the attempts are used up."""
        if ended.code in _REFUSALS:
            log.error("%s refused the worker: %s: %s", self.address, ended.code.name,
                      ended.details)  # fmt: skip
            raise WorkerError(ended.code, ended.details)
        if serving.stopping.is_set() and serving.tasks.idle():
            return False
        if self._attempts is not None and failures > self._attempts:
            raise WorkerError(
                grpc.StatusCode.UNAVAILABLE,
                f"{self.address}: no stream after {failures} attempts; the last: "
                f"{ended.code.name}: {ended.details}",
            )
        wait = backoff_s(failures, initial_s=self._backoff[0], max_s=self._backoff[1])
        log.warning("stream to %s ended (%s: %s); connecting again in %.2f s", self.address,
                    ended.code.name, ended.details, wait)  # fmt: skip
        if serving.stopping.is_set():
            await asyncio.sleep(wait)
        else:  # a stop cuts the wait short (with nothing in hand, serve() returns)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(serving.stopping.wait(), wait)
        return True

    def _call_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata + authorization(self._token)

    def _channel(self) -> grpc.aio.Channel:
        if self._credentials is None:
            return grpc.aio.insecure_channel(self.address)
        return grpc.aio.secure_channel(self.address, self._credentials)
