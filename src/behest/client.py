"""A small asyncio client for behest's RunService that resumes broken event streams.

Event streams (`stream_run`, `watch`) survive a server restart or network break: on
UNAVAILABLE they reconnect with WatchRunEvents after the last sequence seen, with bounded
exponential backoff. Any other status is raised at once as `grpc.aio.AioRpcError`; so is
UNAVAILABLE once the attempts are used up. A stream that ends with OK before the run's
terminal event is treated as a break too, and raises ConnectionError when attempts run out.

Credentials: `token` goes as `authorization: Bearer <token>` metadata on every call (send it
over TLS unless the server is on loopback: plaintext can be read on the way); `tls_ca` (root
certificates, PEM) switches the channel to TLS, and `tls_cert` with `tls_key` add a client
certificate (mTLS). The token is never part of what this module prints, logs or raises.

Listings (all pages, read as they are needed): `run_events` (a run's stored events, not
live), `list_sessions`, `get_session`, `session_messages`, `delete_session`, `list_tools` and
`list_providers`.

Runs that wait (client_waits.py): `create_run` and `stream_run` take the run's waiting options;
`submit_approvals`, `submit_tool_results` and `pending_calls` answer and list waiting calls.
Given `approve` or client tool functions, `stream_run` and `watch` answer the waiting calls
they cover themselves, each once and never one already decided, across reconnects.
"""

from __future__ import annotations

import asyncio
import os
import random
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, Unpack

import grpc
import grpc.aio

from behest._proto.agent.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
    run_pb2,
    run_pb2_grpc,
    session_pb2,
    session_pb2_grpc,
)
from behest.client_inputs import RunOptions, fill
from behest.client_waits import (
    Approval,
    Approver,
    Attendant,
    ClientTool,
    Decision,
    ToolFunction,
    WaitingCall,
    WaitOptions,
    approvals_request,
    results_request,
    tool_functions,
    tool_specs,
)
from behest.domain import events

__all__ = [
    "AgentEvent",
    "Approval",
    "Approver",
    "BehestClient",
    "ClientTool",
    "Decision",
    "ToolFunction",
    "WaitOptions",
    "WaitingCall",
    "is_terminal",
]

AgentEvent = run_pb2.AgentEvent
TERMINAL_KINDS = events.TERMINAL_KINDS
# Only these mean "the server or the network went away"; any other status is an answer.
_RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE})
# What a bearer token may hold: visible ASCII (gRPC refuses other header bytes).
_TOKEN_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F))

FilePath = str | os.PathLike[str]
_Stub = TypeVar("_Stub")


def is_terminal(event: run_pb2.AgentEvent) -> bool:
    """Whether the event ends its run (RunCompleted, RunFailed or RunCancelled)."""
    return event.WhichOneof("event") in TERMINAL_KINDS


class BehestClient:
    """RunService over one channel; use as `async with BehestClient(address) as client:`.

    `token`: a bearer token, sent on every call. `tls_ca`: a PEM file of the root certificates
    that sign the server's certificate; TLS is used when it (or a client certificate) is given.
    `tls_cert`, `tls_key`: PEM files of a client certificate and its key, for mTLS. Files are
    read here: an unreadable one raises OSError, a token gRPC cannot send ValueError.
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
        self._credentials = _channel_credentials(tls_ca, tls_cert, tls_key)
        # Kept apart from `metadata`: what every call sends, the token included.
        if token and any(key.lower() == "authorization" for key, _ in self.metadata):
            raise ValueError("give the token as `token` or in `metadata`, not both")
        self._call_metadata = self.metadata + _authorization(token)
        # Bounds on each outage: attempts reset whenever an event gets through.
        self._attempts = reconnect_attempts
        self._backoff_s = reconnect_backoff_s
        self._backoff_max_s = reconnect_backoff_max_s
        self._channel: grpc.aio.Channel | None = None
        self._stub: run_pb2_grpc.RunServiceStub | None = None
        self._sessions: session_pb2_grpc.SessionServiceStub | None = None
        self._tools: catalog_pb2_grpc.ToolServiceStub | None = None
        self._providers: catalog_pb2_grpc.ProviderServiceStub | None = None
        self._usage: run_pb2_grpc.UsageServiceStub | None = None

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
        self._stub = run_pb2_grpc.RunServiceStub(self._channel)
        self._sessions = session_pb2_grpc.SessionServiceStub(self._channel)
        self._tools = catalog_pb2_grpc.ToolServiceStub(self._channel)
        self._providers = catalog_pb2_grpc.ProviderServiceStub(self._channel)
        self._usage = run_pb2_grpc.UsageServiceStub(self._channel)
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
            channel, self._channel, self._stub = self._channel, None, None
            self._sessions = self._tools = self._providers = None
            self._usage = None
            await channel.close()

    @property
    def stub(self) -> run_pb2_grpc.RunServiceStub:
        """The generated stub, for RPCs this client does not wrap: pass them
        `metadata=client.call_metadata` so that they carry the token too."""
        if self._stub is None:
            raise RuntimeError("BehestClient is not open; use `async with BehestClient(...)`")
        return self._stub

    async def create_run(
        self,
        input: str,
        *,
        session_id: str = "",
        provider: str = "local",
        model: str = "echo",
        metadata: str = "",
        tool_choice: str = "",
        client_request_id: str = "",
        **waits: Unpack[RunOptions],
    ) -> tuple[str, str]:
        """Create a run and return (run_id, session_id); retried on UNAVAILABLE, idempotently.

        `waits`: the run's waiting options (WaitOptions: `client_tools`, name → ClientTool or
        (description, JSON Schema); `approval_required_tools`; `approve_side_effects`;
        `approval_timeout_s`; `client_tool_timeout_s`) and what it is given beside its text
        (RunOptions in client_inputs.py: `content`, `response_format`, `reasoning`)."""
        request = _create_request(
            input, session_id, provider, model, metadata, tool_choice, client_request_id, waits
        )
        response = await self._unary(self.stub.CreateRun, request)
        return response.run_id, response.session_id

    async def stream_run(
        self,
        input: str,
        *,
        session_id: str = "",
        provider: str = "local",
        model: str = "echo",
        metadata: str = "",
        tool_choice: str = "",
        client_request_id: str = "",
        approve: Approver | None = None,
        **waits: Unpack[RunOptions],
    ) -> AsyncGenerator[run_pb2.AgentEvent, None]:
        """Create a run and yield its events to the terminal one, resuming after breaks.

        The options are create_run's. With `approve`, or client tools given as
        ClientTool(run=function), the waiting calls they cover are answered after their
        request event is yielded (see client_waits.py)."""
        request = _create_request(
            input, session_id, provider, model, metadata, tool_choice, client_request_id, waits
        )
        attendant = Attendant(self, approve, tool_functions(waits.get("client_tools", {})))
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
    ) -> AsyncGenerator[run_pb2.AgentEvent, None]:
        """Yield a run's events with sequence > `after` to the terminal one, resuming.

        With `approve` or `client_tools` (name → function, or ClientTool(run=function)), the
        waiting calls they cover are answered as in stream_run; calls decided before (a
        replay) are not answered again."""
        attendant = Attendant(self, approve, tool_functions(client_tools or {}))
        async for event in self._follow(None, run_id, after):
            yield event
            await attendant.on_event(event)

    async def cancel(self, run_id: str) -> None:
        """Cancel an active run."""
        await self.stub.CancelRun(
            run_pb2.CancelRunRequest(run_id=run_id), metadata=self._call_metadata
        )

    async def get_run(self, run_id: str) -> run_pb2.RunRecord:
        """Return one run's record."""
        request = run_pb2.GetRunRequest(run_id=run_id)
        return (await self.stub.GetRun(request, metadata=self._call_metadata)).run

    async def list_runs(
        self,
        *,
        session_id: str = "",
        status: common_pb2.RunStatus.ValueType = common_pb2.RUN_STATUS_UNSPECIFIED,
        limit: int = 0,
        offset: int = 0,
    ) -> list[run_pb2.RunRecord]:
        """List runs, newest first, optionally by session and status."""
        request = run_pb2.ListRunsRequest(
            session_id=session_id,
            status=status,
            pagination=common_pb2.Pagination(limit=limit, offset=offset),
        )
        return list((await self.stub.ListRuns(request, metadata=self._call_metadata)).runs)

    async def get_output(self, run_id: str) -> run_pb2.RunOutput:
        """Return what a finished run produced."""
        request = run_pb2.GetRunOutputRequest(run_id=run_id)
        return (await self.stub.GetRunOutput(request, metadata=self._call_metadata)).output

    async def submit_approvals(
        self, run_id: str, approvals: Mapping[str, Approval | Decision]
    ) -> list[str]:
        """Decide approval requests (call id → Approval or Decision), all or nothing; returns
        the run's calls still waiting. Retried on UNAVAILABLE (the same answer again is
        harmless); an unknown call is NOT_FOUND, one decided otherwise or expired
        FAILED_PRECONDITION."""
        request = approvals_request(run_id, approvals)
        return list((await self._unary(self.stub.SubmitApprovals, request)).waiting_call_ids)

    async def submit_tool_results(
        self, run_id: str, results: Mapping[str, str | tuple[str, bool]]
    ) -> list[str]:
        """Send client tool results (call id → output, or (output, is_error)), all or nothing;
        returns the run's calls still waiting. Retried and refused as submit_approvals."""
        request = results_request(run_id, results)
        return list((await self._unary(self.stub.SubmitToolResults, request)).waiting_call_ids)

    async def pending_calls(self, run_id: str) -> list[run_pb2.PendingCall]:
        """The run's calls that wait for an answer now, in the order the model made them."""
        request = run_pb2.ListPendingCallsRequest(run_id=run_id)
        return list((await self._unary(self.stub.ListPendingCalls, request)).calls)

    # --- listings: a run's stored events, sessions, tools and providers --------------------

    async def run_events(
        self, run_id: str, after: int = 0, *, page: int = 0
    ) -> AsyncGenerator[run_pb2.AgentEvent, None]:
        """The run's stored events after `after`, page by page (`page` events a call; 0: the
        server's default); only what is stored when each page is read: not live."""
        more = True
        while more:
            request = run_pb2.ListRunEventsRequest(run_id=run_id, after_sequence=after, limit=page)
            response = await self._unary(self.stub.ListRunEvents, request)
            for event in response.events:
                yield event
            after, more = response.last_sequence, response.more

    async def list_sessions(
        self, *, limit: int = 0, offset: int = 0
    ) -> list[session_pb2.SessionRecord]:
        """The tenant's sessions (SessionRecord), newest first."""
        request = session_pb2.ListSessionsRequest(
            pagination=common_pb2.Pagination(limit=limit, offset=offset)
        )
        return list((await self._unary(self._open(self._sessions).ListSessions, request)).sessions)

    async def get_session(self, session_id: str) -> session_pb2.SessionRecord:
        request = session_pb2.GetSessionRequest(session_id=session_id)
        response = await self._unary(self._open(self._sessions).GetSession, request)
        found: session_pb2.SessionRecord = response.session
        return found

    async def session_messages(
        self, session_id: str, from_position: int = 0, *, page: int = 0
    ) -> AsyncGenerator[common_pb2.Message, None]:
        """The session's transcript from a position, page by page (`page` messages a call)."""
        stub, more = self._open(self._sessions), True
        while more:
            request = session_pb2.ListSessionMessagesRequest(
                session_id=session_id, from_position=from_position, limit=page
            )
            response = await self._unary(stub.ListSessionMessages, request)
            for message in response.messages:
                yield message
            from_position, more = response.next_position, response.more

    async def delete_session(self, session_id: str) -> int:
        """Erase a session and everything of its runs (not retried: a repeat would be
        NOT_FOUND); how many runs went with it."""
        request = session_pb2.DeleteSessionRequest(session_id=session_id)
        stub = self._open(self._sessions)
        response = await stub.DeleteSession(request, metadata=self._call_metadata)
        return int(response.runs_deleted)

    async def list_tools(self) -> list[catalog_pb2.ToolInfo]:
        """The tools runs may use, by name."""
        stub = self._open(self._tools)
        return list((await self._unary(stub.ListTools, catalog_pb2.ListToolsRequest())).tools)

    async def list_providers(self) -> list[catalog_pb2.ProviderInfo]:
        """The configured providers and their models (never a key)."""
        stub = self._open(self._providers)
        request = catalog_pb2.ListProvidersRequest()
        return list((await self._unary(stub.ListProviders, request)).providers)

    async def usage(
        self, *, session_id: str = "", from_day: str = "", to_day: str = ""
    ) -> run_pb2.GetUsageResponse:
        """Tokens and cost of the caller's tenant per UTC day (default: today)."""
        request = run_pb2.GetUsageRequest(session_id=session_id, from_day=from_day, to_day=to_day)
        return await self._unary(self._open(self._usage).GetUsage, request)

    def _open(self, stub: _Stub | None) -> _Stub:
        if stub is None:
            raise RuntimeError("BehestClient is not open; use `async with BehestClient(...)`")
        return stub

    async def _unary(self, method: Any, request: Any) -> Any:
        """A unary call, retried on UNAVAILABLE with backoff (for idempotent requests)."""
        attempt = 0
        while True:
            try:
                return await method(request, metadata=self._call_metadata)
            except grpc.aio.AioRpcError as exc:
                attempt = await self._backoff_or_raise(exc, attempt)

    async def _follow(
        self, create: run_pb2.CreateRunRequest | None, run_id: str, after: int
    ) -> AsyncIterator[run_pb2.AgentEvent]:
        # Until the first event arrives the run id is unknown, so a break is retried with the
        # same CreateRunStream (same client_request_id → same run, streamed from sequence 1).
        last, attempt, ended = after, 0, False
        while True:
            if run_id:
                watch = run_pb2.WatchRunEventsRequest(run_id=run_id, last_event_id=last)
                call = self.stub.WatchRunEvents(watch, metadata=self._call_metadata)
            else:
                assert create is not None
                call = self.stub.CreateRunStream(create, metadata=self._call_metadata)
            try:
                async for event in call:
                    if event.sequence <= last:
                        continue  # a replay overlapping what we already yielded
                    run_id, last, attempt = event.run_id, event.sequence, 0
                    yield event
                    if is_terminal(event):
                        return
                # OK before the terminal event: either the run ended and nothing is left after
                # the cursor, or a server closed the stream early (draining on shutdown). If
                # the run has ended, one more watch collects whatever is left; if that also
                # ends empty, the caller has seen everything there is.
                if ended:
                    return
                if run_id and await self._has_ended(run_id):
                    ended = True
                    continue
                attempt = await self._backoff_or_raise(None, attempt)
            except grpc.aio.AioRpcError as exc:
                attempt = await self._backoff_or_raise(exc, attempt)
            finally:
                call.cancel()

    async def _has_ended(self, run_id: str) -> bool:
        status = (await self.get_run(run_id)).status
        return status in (
            common_pb2.RUN_STATUS_COMPLETED,
            common_pb2.RUN_STATUS_FAILED,
            common_pb2.RUN_STATUS_CANCELLED,
        )

    async def _backoff_or_raise(self, exc: grpc.aio.AioRpcError | None, attempt: int) -> int:
        if exc is not None and exc.code() not in _RETRYABLE:
            raise exc
        if attempt >= self._attempts:
            if exc is not None:
                raise exc
            raise ConnectionError(f"{self.address}: stream ended before the run's last event")
        delay = min(self._backoff_max_s, self._backoff_s * 2**attempt)
        # Jitter keeps many clients of a restarted server from reconnecting in step.
        await asyncio.sleep(random.uniform(delay / 2, delay))
        return attempt + 1


def _authorization(token: str) -> tuple[tuple[str, str], ...]:
    """The metadata that carries `token`, or none without one."""
    token = token.strip()
    if not token:
        return ()
    if not set(token) <= _TOKEN_CHARS:
        # Never echo the token: say what is wrong with it, not what it is.
        raise ValueError("the token must be visible ASCII characters, without spaces")
    return (("authorization", f"Bearer {token}"),)


def _channel_credentials(
    ca: FilePath | None, cert: FilePath | None, key: FilePath | None
) -> grpc.ChannelCredentials | None:
    """TLS credentials from PEM files; None (plaintext) when no CA or certificate is given."""
    if bool(cert) != bool(key):
        raise ValueError("a client certificate and its key go together (tls_cert and tls_key)")
    if not ca and not cert:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read(ca, "TLS CA") if ca else None,
        private_key=_read(key, "TLS key") if key else None,
        certificate_chain=_read(cert, "TLS certificate") if cert else None,
    )


def _read(path: FilePath, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise OSError(f"cannot read the {what} file {os.fspath(path)}: {exc.strerror}") from None


def _create_request(
    input: str,
    session_id: str,
    provider: str,
    model: str,
    metadata: str,
    tool_choice: str,
    client_request_id: str,
    waits: RunOptions,
) -> run_pb2.CreateRunRequest:
    request = run_pb2.CreateRunRequest(
        session_id=session_id,
        provider=common_pb2.ProviderId(value=provider),
        model=common_pb2.ModelName(value=model),
        input=input,
        metadata=metadata,
        tool_choice=tool_choice,
        # Always sent, so that re-sending the create after a break is idempotent.
        client_request_id=client_request_id or str(uuid.uuid4()),
        client_tools=tool_specs(waits.get("client_tools", {})),
        approval_required_tools=list(waits.get("approval_required_tools", ())),
        approve_side_effects=waits.get("approve_side_effects", False),
        approval_timeout_s=waits.get("approval_timeout_s", 0),
        client_tool_timeout_s=waits.get("client_tool_timeout_s", 0),
    )
    fill(request, waits)
    return request
