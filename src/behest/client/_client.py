"""BehestClient: behest's services over one channel, in behest's own types.

Event streams (`stream_run`, `watch`) survive a server restart or a network break: on
UNAVAILABLE they reconnect with WatchRunEvents after the last sequence seen, with bounded
exponential backoff; so do idempotent unary calls. A stream that ends before the run's
terminal event counts as a break. Once the attempts are used up the call raises Unavailable;
any other status raises its BehestError subclass at once (_errors.py).

Credentials: `token` goes as `authorization: Bearer <token>` metadata on every call (send it
over TLS unless the server is on loopback); `tls_ca` (root certificates, PEM) switches the
channel to TLS, and `tls_cert` with `tls_key` add a client certificate (mTLS). The token is
never part of what this package prints, logs or raises.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc
import grpc.aio

from behest.client import _wire
from behest.client._agent_calls import AgentCalls
from behest.client._channel import Backoff, FilePath, authorization, credentials
from behest.client._enums import Decision, RunStatus
from behest.client._errors import Unavailable, error_of
from behest.client._events import Event
from behest.client._executions import ToolExecutions
from behest.client._options import RunOptions
from behest.client._reading import enum_of
from behest.client._session_calls import SessionCalls
from behest.client._types import (
    CreatedRun,
    Output,
    PendingCall,
    Provider,
    Run,
    Tool,
    Usage,
)
from behest.client._waits import (
    Approval,
    Approver,
    Attendant,
    ClientTool,
    QuestionHandler,
    QuestionReply,
    ToolFunction,
)
from behest.client._waits import tool_functions as _functions

_DEFAULTS = RunOptions()
_NOT_OPEN = "BehestClient is not open; use `async with BehestClient(...)`"


class BehestClient(ToolExecutions, AgentCalls, SessionCalls):
    """behest's services over one channel; use as `async with BehestClient(address) as c:`.

    Files are read here: an unreadable one raises OSError; a token gRPC cannot send, or a
    certificate without its key, ValueError.
    """

    def __init__(
        self,
        address: str,
        *,
        metadata: Sequence[tuple[str, str]] = (),
        token: str = "",
        tls_ca: FilePath | None = None,
        tls_cert: FilePath | None = None,
        tls_key: FilePath | None = None,
        reconnect_attempts: int = 8,
        reconnect_backoff_s: float = 0.2,
        reconnect_backoff_max_s: float = 5.0,
    ) -> None:
        self.address = address
        self.metadata = tuple(metadata)
        self._credentials = credentials(tls_ca, tls_cert, tls_key)
        if token and any(key.lower() == "authorization" for key, _ in self.metadata):
            raise ValueError("give the token as `token` or in `metadata`, not both")
        self._call_metadata = self.metadata + authorization(token)
        # Bounds on each outage: attempts reset whenever an event gets through.
        self._backoff = Backoff(reconnect_attempts, reconnect_backoff_s, reconnect_backoff_max_s)
        self._channel: grpc.aio.Channel | None = None
        self._stubs: _wire.Stubs | None = None

    @property
    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        """What every call of this client sends: `metadata` and the token's authorization."""
        return self._call_metadata

    @property
    def uses_tls(self) -> bool:
        """Whether the channel is TLS (a CA or a client certificate was given)."""
        return self._credentials is not None

    async def __aenter__(self) -> BehestClient:
        if self._credentials is None:
            self._channel = grpc.aio.insecure_channel(self.address)
        else:
            self._channel = grpc.aio.secure_channel(self.address, self._credentials)
        self._stubs = _wire.Stubs(self._channel)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel; idempotent."""
        if self._channel is not None:
            channel, self._channel, self._stubs = self._channel, None, None
            await channel.close()

    @property
    def _s(self) -> _wire.Stubs:
        if self._stubs is None:
            raise RuntimeError(_NOT_OPEN)
        return self._stubs

    # --- runs -----------------------------------------------------------------------------

    async def create_run(
        self, input: str, options: RunOptions = _DEFAULTS, *, client_request_id: str = ""
    ) -> CreatedRun:
        """Create a run; retried on UNAVAILABLE, idempotently (one client_request_id)."""
        # Always sent, so that re-sending the create after a break is idempotent.
        request = _wire.create_request(input, options, client_request_id or str(uuid.uuid4()))
        return _wire.created(await self._unary(self._s.runs.CreateRun, request))

    async def stream_run(
        self,
        input: str,
        options: RunOptions = _DEFAULTS,
        *,
        client_request_id: str = "",
        approve: Approver | None = None,
        answer_question: QuestionHandler | None = None,
    ) -> AsyncIterator[Event]:
        """Create a run and yield its events to the terminal one, resuming after breaks.

        With `approve`, client tools given as ClientTool(run=function), or `answer_question`
        (for the questions running tools ask), the waiting calls they cover are answered after
        their request event is yielded (_waits.py)."""
        request = _wire.create_request(input, options, client_request_id or str(uuid.uuid4()))
        tools = _functions(options.client_tools)
        attendant = Attendant(self, approve, tools, answer_question)
        async for event in self._follow(request, "", 0):
            yield event
            await attendant.on_event(event)

    async def watch(
        self,
        run_id: str,
        after: int = 0,
        *,
        approve: Approver | None = None,
        client_tools: Mapping[str, ClientTool | ToolFunction] | None = None,
        answer_question: QuestionHandler | None = None,
    ) -> AsyncIterator[Event]:
        """Yield a run's events with sequence > `after` to the terminal one, resuming; the
        waiting calls `approve`, `client_tools` and `answer_question` cover are answered as
        in stream_run."""
        tools = _functions(client_tools or {})
        attendant = Attendant(self, approve, tools, answer_question)
        async for event in self._follow(None, run_id, after):
            yield event
            await attendant.on_event(event)

    async def cancel(self, run_id: str, reason: str = "") -> RunStatus:
        """Cancel an active run; the status it ended with. Retried on UNAVAILABLE: a run
        already cancelled answers CANCELLED again."""
        request = _wire.run.CancelRunRequest(run_id=run_id, reason=reason)
        response = await self._unary(self._s.runs.CancelRun, request)
        return enum_of(RunStatus, response.status)

    async def get_run(self, run_id: str) -> Run:
        """One run's record."""
        request = _wire.run.GetRunRequest(run_id=run_id)
        return _wire.run_of((await self._unary(self._s.runs.GetRun, request)).run)

    async def list_runs(
        self,
        *,
        session_id: str = "",
        status: RunStatus = RunStatus.UNSPECIFIED,
        agent: str = "",
        agent_version: int = 0,
        limit: int = 0,
        offset: int = 0,
    ) -> list[Run]:
        """Runs, newest first, optionally of one session, in one status, of one agent (by
        name) and, with it, of one of its versions."""
        request = _wire.run.ListRunsRequest(
            session_id=session_id,
            status=status.value,  # type: ignore[arg-type]
            pagination=_wire.Pagination(limit=limit, offset=offset),
            agent=agent,
            agent_version=agent_version,
        )
        response = await self._unary(self._s.runs.ListRuns, request)
        return [_wire.run_of(r) for r in response.runs]

    async def get_output(self, run_id: str) -> Output:
        """What a finished run produced."""
        request = _wire.run.GetRunOutputRequest(run_id=run_id)
        return _wire.output_of((await self._unary(self._s.runs.GetRunOutput, request)).output)

    async def run_events(
        self, run_id: str, after: int = 0, *, page: int = 0
    ) -> AsyncIterator[Event]:
        """The run's stored events after `after`, page by page (`page` a call; 0: the server's
        default): what is stored when each page is read, not live."""
        more = True
        while more:
            request = _wire.run.ListRunEventsRequest(
                run_id=run_id, after_sequence=after, limit=page
            )
            response = await self._unary(self._s.runs.ListRunEvents, request)
            for event in response.events:
                yield _wire.event_of(event)
            after, more = response.last_sequence, response.more

    # --- waiting calls --------------------------------------------------------------------

    async def submit_approvals(
        self, run_id: str, approvals: Mapping[str, Approval | Decision]
    ) -> list[str]:
        """Decide approval requests (call id → Approval or Decision), all or nothing; the run's
        calls still waiting. An unknown call is NotFound, one decided otherwise or expired
        FailedPrecondition; retried (the same answer again is harmless)."""
        request = _wire.approvals_request(run_id, approvals)
        return list((await self._unary(self._s.runs.SubmitApprovals, request)).waiting_call_ids)

    async def submit_tool_results(
        self, run_id: str, results: Mapping[str, str | tuple[str, bool]]
    ) -> list[str]:
        """Send client tool results (call id → output, or (output, is_error)), all or nothing;
        the run's calls still waiting. Retried and refused as submit_approvals."""
        request = _wire.results_request(run_id, results)
        return list((await self._unary(self._s.runs.SubmitToolResults, request)).waiting_call_ids)

    async def submit_elicitation_answers(
        self, run_id: str, answers: Mapping[str, QuestionReply]
    ) -> list[str]:
        """Answer questions running tools asked (elicitation id → the content of an accepted
        answer, a dict; ElicitAction.DECLINE or CANCEL; or a Reply), all or nothing; the run's
        calls still waiting. Content that does not fit the question's schema is
        InvalidArgument; otherwise retried and refused as submit_approvals."""
        request = _wire.elicitation_answers_request(run_id, answers)
        response = await self._unary(self._s.runs.SubmitElicitationAnswers, request)
        return list(response.waiting_call_ids)

    async def pending_calls(self, run_id: str) -> list[PendingCall]:
        """The run's calls that wait for an answer now, in the order the model made them."""
        request = _wire.run.ListPendingCallsRequest(run_id=run_id)
        response = await self._unary(self._s.runs.ListPendingCalls, request)
        return [_wire.pending_of(p) for p in response.calls]

    # --- sessions, tools, providers, usage ------------------------------------------------

    async def list_tools(self) -> list[Tool]:
        """The tools runs may use, by name."""
        response = await self._unary(self._s.tools.ListTools, _wire.catalog.ListToolsRequest())
        return [_wire.tool_of(t) for t in response.tools]

    async def list_providers(self) -> list[Provider]:
        """The configured providers and their models (never a key)."""
        request = _wire.catalog.ListProvidersRequest()
        response = await self._unary(self._s.providers.ListProviders, request)
        return [_wire.provider_of(p) for p in response.providers]

    async def usage(self, *, session_id: str = "", from_day: str = "", to_day: str = "") -> Usage:
        """Tokens and cost of the caller's tenant per UTC day (default: today)."""
        request = _wire.run.GetUsageRequest(session_id=session_id, from_day=from_day, to_day=to_day)
        return _wire.usage_of(await self._unary(self._s.usage.GetUsage, request))

    # --- calls: every status becomes a BehestError here ------------------------------------

    async def _unary(self, method: Any, request: Any, *, retry: bool = True) -> Any:
        """A unary call; retried on UNAVAILABLE with backoff unless `retry` is off: every call
        is idempotent but DeleteSession, whose repeat would answer NotFound."""
        attempt = 0
        while True:
            try:
                return await method(request, metadata=self._call_metadata)
            except grpc.aio.AioRpcError as exc:
                error = error_of(exc)
                if not (retry and isinstance(error, Unavailable)):
                    raise error from None
                if not await self._backoff.wait(attempt):
                    raise error from None
                attempt += 1

    async def _follow(self, create: Any, run_id: str, after: int) -> AsyncIterator[Event]:
        # Until the first event arrives the run id is unknown, so a break is retried with the
        # same CreateRunStream (same client_request_id → same run, streamed from sequence 1).
        last, attempt, ended = after, 0, False
        while True:
            if run_id:
                watch = _wire.run.WatchRunEventsRequest(run_id=run_id, last_event_id=last)
                call = self._s.runs.WatchRunEvents(watch, metadata=self._call_metadata)
            else:
                call = self._s.runs.CreateRunStream(create, metadata=self._call_metadata)
            error: Unavailable | None = None
            try:
                async for wire_event in call:
                    if wire_event.sequence <= last:
                        continue  # a replay overlapping what we already yielded
                    event = _wire.event_of(wire_event)
                    run_id, last, attempt = event.run_id, event.sequence, 0
                    yield event
                    if event.terminal:
                        return
            except grpc.aio.AioRpcError as exc:
                translated = error_of(exc)
                if not isinstance(translated, Unavailable):
                    raise translated from None
                error = translated
            finally:
                call.cancel()
            if error is None:
                # OK before the terminal event: either the run ended and nothing is left after
                # the cursor, or a server closed the stream early (draining on shutdown). If
                # the run has ended, one more watch collects whatever is left; if that also
                # ends empty, the caller has seen everything there is.
                if ended:
                    return
                if run_id and (await self.get_run(run_id)).status.ended:
                    ended = True
                    continue
            if not await self._backoff.wait(attempt):
                raise error or Unavailable(
                    grpc.StatusCode.UNAVAILABLE,
                    f"{self.address}: the stream ended before the run's last event",
                )
            attempt += 1
