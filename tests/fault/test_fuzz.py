"""Property-based fuzz of every RPC of agent.v1 RunService, CompactionService,
SnapshotService, UsageService, SessionService, ToolService and ProviderService, through a real
server on 127.0.0.1:0 and real grpc.aio clients.

The tests: raw bytes to each of the 25 RPCs; CreateRun/CreateRunStream with up to three
adversarial fields; the `script` model with adversarial scripts; GetRun, GetRunOutput,
CancelRun, WatchRunEvents and ListRuns with adversarial ids, cursors, filters and pages;
CompactionService and SnapshotService; deep JSON and absurd numbers where clients put JSON.

How it runs. Each test gets its own server (the `world` fixture: `start_server(fast_settings(
tmp_path))`, seeded with a completed, a failed, a cancelled and a tool-using run, and one
"busy" run that sleeps inside its model call) and is an `async def` decorated with `@given`:
pytest-asyncio (asyncio_mode = auto) recognises hypothesis tests and runs every example on the
test's event loop, the loop the fixture's server runs on. The server is shared by the
examples of a test on purpose (HealthCheck.function_scoped_fixture is suppressed): after each
example every run the fuzz started has ended and the busy run is running again, and the
properties hold whatever earlier examples did. Ids of runs and sessions the server holds are
drawn as `IdSpec`s (a slot, a misspelling, a literal) and resolved at run time, so that the
same choices always make the same draws.

Every request goes through a generic `channel.unary_unary` / `unary_stream` with identity
serializers: typed requests are serialised here, raw bytes go out as they are. Streams are
read to their end or first error, under a deadline (a watch of the busy run, which does not
end, until it is quiet). Properties, for every request:

1. the status code is OK or one this RPC may answer (`Rpc.allowed`), never INTERNAL or
   UNKNOWN; where the docs determine the answer (a malformed id, an unknown run or session,
   a cursor past a finished run's end, a field over its documented bound, a message over the
   4 MiB gRPC bound, …) it is that answer; an OK response decodes as the RPC's response type;
2. an error message names no Python class, traceback or interpreter internals (`LEAK`),
   unless the request itself carried that text (messages may quote the request);
3. a refused request wrote nothing: the rows of every table of `<data_dir>/behest.db`
   (as listed by sqlite_master, opened read-only) are counted before and after;
4. the server still answers (grpc.health.v1 Check) afterwards.

Runs the fuzz creates must end by themselves, quickly (`RUN_END_S`): a CreateRunStream is read
to its terminal event, a CreateRun is watched to it. A run that does not end is a HANG (it is
then cancelled, so that later examples start clean). A run that fails must say why in its own
words: not "internal error" (an unexpected exception in the loop), no class names. Echo runs
that complete must echo their input exactly; events are numbered 1, 2, … with no gap.

Not generated: valid but long work (a `script` step's `deltas` up to 1,000,000, delays up to
ten minutes, a Retry-After under 60 s) — only small values or values that must be refused.

Bounded for CI: `derandomize=True` (the same examples on every run), no shrinking (a hang
would be waited for on every shrink step; a failure's message describes the request
instead), about 1,300 fuzzed requests in all; BEHEST_TEST_FUZZ_SCALE=5 runs five times as
many. The requests per RPC and the answers are printed at the end of each test (pytest -s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import DecodeError, Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from behest._proto.agent.v1 import catalog_pb2 as cat
from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import session_pb2 as spb
from tests.fault import fuzz_strategies as fs
from tests.support import Server, create_request, fast_settings, script, start_server, stop_server

Code = grpc.StatusCode

SCALE = float(os.environ.get("BEHEST_TEST_FUZZ_SCALE", "1"))
CALL_TIMEOUT_S = 10.0  # a unary RPC, or a stream that must end by itself
RUN_END_S = 8.0  # a run the fuzz created must have ended by then
LIVE_IDLE_S = 0.1  # a watch of the busy (live) run is read until it is quiet this long
TERMINAL = ("run_completed", "run_failed", "run_cancelled")
NOTABLE_EVENTS = (
    *TERMINAL,
    "tool_execution_finished",
    "doom_loop_detected",
    "compaction_finished",
    "compaction_circuit_opened",
)


def examples(n: int) -> int:
    return max(1, round(n * SCALE))


# Hypothesis warns when it prints a drawn value of megabytes; the warning is not the finding.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    print_blob=False,
    suppress_health_check=(
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.filter_too_much,
    ),
)


# --- the RPCs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rpc:
    service: str
    name: str
    request: type[Message]
    response: type[Message]
    streaming: bool
    allowed: frozenset[Code]
    mutating: bool = False

    @property
    def path(self) -> str:
        return f"/agent.v1.{self.service}/{self.name}"


def _codes(*codes: Code) -> frozenset[Code]:
    return frozenset((Code.OK, *codes))


IA, NF, FP, OOR, AE, AB, RE = (
    Code.INVALID_ARGUMENT,
    Code.NOT_FOUND,
    Code.FAILED_PRECONDITION,
    Code.OUT_OF_RANGE,
    Code.ALREADY_EXISTS,
    Code.ABORTED,
    Code.RESOURCE_EXHAUSTED,
)
_CREATE = _codes(IA, NF, AE, AB, RE)
RPCS = {
    rpc.name: rpc
    for rpc in (
        Rpc(
            "RunService",
            "CreateRun",
            pb.CreateRunRequest,
            pb.CreateRunResponse,
            False,
            _CREATE,
            True,
        ),
        Rpc(
            "RunService", "CreateRunStream", pb.CreateRunRequest, pb.AgentEvent, True, _CREATE, True
        ),
        Rpc("RunService", "ListRuns", pb.ListRunsRequest, pb.ListRunsResponse, False, _codes(IA)),
        Rpc("RunService", "GetRun", pb.GetRunRequest, pb.GetRunResponse, False, _codes(IA, NF)),
        Rpc(
            "RunService",
            "GetRunOutput",
            pb.GetRunOutputRequest,
            pb.GetRunOutputResponse,
            False,
            _codes(IA, NF, FP),
        ),
        Rpc(
            "RunService",
            "CancelRun",
            pb.CancelRunRequest,
            pb.CancelRunResponse,
            False,
            _codes(IA, NF, FP),
            True,
        ),
        Rpc(
            "RunService",
            "WatchRunEvents",
            pb.WatchRunEventsRequest,
            pb.AgentEvent,
            True,
            _codes(IA, NF, OOR, RE),
        ),
        Rpc(
            "RunService",
            "SubmitApprovals",
            pb.SubmitApprovalsRequest,
            pb.SubmitApprovalsResponse,
            False,
            _codes(IA, NF, FP),
            True,
        ),
        Rpc(
            "RunService",
            "SubmitToolResults",
            pb.SubmitToolResultsRequest,
            pb.SubmitToolResultsResponse,
            False,
            _codes(IA, NF, FP),
            True,
        ),
        Rpc(
            "RunService",
            "ListPendingCalls",
            pb.ListPendingCallsRequest,
            pb.ListPendingCallsResponse,
            False,
            _codes(IA, NF),
        ),
        Rpc(
            "RunService",
            "ListRunEvents",
            pb.ListRunEventsRequest,
            pb.ListRunEventsResponse,
            False,
            _codes(IA, NF),
        ),
        Rpc(
            "RunService",
            "CreateStreamTicket",
            pb.CreateStreamTicketRequest,
            pb.CreateStreamTicketResponse,
            False,
            _codes(IA, NF),
        ),
        Rpc("UsageService", "GetUsage", pb.GetUsageRequest, pb.GetUsageResponse, False, _codes(IA)),
        Rpc(
            "SessionService",
            "ListSessions",
            spb.ListSessionsRequest,
            spb.ListSessionsResponse,
            False,
            _codes(IA),
        ),
        Rpc(
            "SessionService",
            "GetSession",
            spb.GetSessionRequest,
            spb.GetSessionResponse,
            False,
            _codes(IA, NF),
        ),
        Rpc(
            "SessionService",
            "ListSessionMessages",
            spb.ListSessionMessagesRequest,
            spb.ListSessionMessagesResponse,
            False,
            _codes(IA, NF),
        ),
        Rpc(
            "SessionService",
            "DeleteSession",
            spb.DeleteSessionRequest,
            spb.DeleteSessionResponse,
            False,
            _codes(IA, NF, FP),
            True,
        ),
        Rpc(
            "ToolService", "ListTools", cat.ListToolsRequest, cat.ListToolsResponse, False, _codes()
        ),
        Rpc(
            "ProviderService",
            "ListProviders",
            cat.ListProvidersRequest,
            cat.ListProvidersResponse,
            False,
            _codes(),
        ),
        Rpc(
            "CompactionService",
            "GetCompactionConfig",
            pb.GetCompactionConfigRequest,
            pb.GetCompactionConfigResponse,
            False,
            _codes(),
        ),
        Rpc(
            "CompactionService",
            "UpdateCompactionConfig",
            pb.UpdateCompactionConfigRequest,
            pb.UpdateCompactionConfigResponse,
            False,
            _codes(IA),
            True,
        ),
        Rpc(
            "CompactionService",
            "GetCircuitBreaker",
            pb.GetCircuitBreakerRequest,
            pb.GetCircuitBreakerResponse,
            False,
            _codes(),
        ),
        Rpc(
            "SnapshotService",
            "ListSnapshots",
            pb.ListSnapshotsRequest,
            pb.ListSnapshotsResponse,
            False,
            _codes(),
        ),
        Rpc(
            "SnapshotService",
            "GetSnapshot",
            pb.GetSnapshotRequest,
            pb.GetSnapshotResponse,
            False,
            _codes(IA, NF),
        ),
        Rpc(
            "SnapshotService",
            "DeleteSnapshot",
            pb.DeleteSnapshotRequest,
            pb.DeleteSnapshotResponse,
            False,
            _codes(IA, NF, FP),
            True,
        ),
    )
}

# What an error message must not show: exception classes ("RecursionError", "JSONDecodeError:"),
# tracebacks, reprs of classes and interpreter or library internals.
LEAK = re.compile(
    r"\b[A-Z][A-Za-z0-9_]*(?:Error|Exception)\b|Traceback|File \"|<class |<module|NoneType"
    r"|object has no attribute|\bsys\.[a-z_]+|google\.protobuf|_pb2\b|sqlalche\.me|sqlite3\."
)


def leaks(text: str, request_text: str) -> list[str]:
    return [m for m in LEAK.findall(text) if m not in request_text]


# --- describing requests in failure messages --------------------------------------------------


def _short(value: object) -> str:
    if isinstance(value, str | bytes) and len(value) > 1000:
        return f"{value[:60]!r}…<{len(value)} {'chars' if isinstance(value, str) else 'bytes'}>"
    return repr(value)


def describe(rpc: Rpc, request: Message | bytes) -> str:
    if isinstance(request, bytes):
        return f"{rpc.path} raw bytes {_short(request)}"
    parts = []
    for fd, value in request.ListFields():
        if isinstance(value, Message):
            inner = ", ".join(f"{f.name}={_short(v)}" for f, v in value.ListFields())
            parts.append(f"{fd.name}={{{inner}}}")
        elif fd.is_repeated:
            parts.append(f"{fd.name}={[_short(v) for v in value]}")
        else:
            parts.append(f"{fd.name}={_short(value)}")
    return f"{rpc.path} {type(request).__name__}({', '.join(parts)})"


# --- outcomes ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    code: Code
    details: str
    responses: list[Any]
    live: bool = False  # a watch of a live run, read until its deadline

    @property
    def ok(self) -> bool:
        return self.code == Code.OK


@dataclass
class KnownRun:
    run_id: str
    session_id: str
    last: int  # the sequence of its last event
    end: str  # its terminal event's kind, or "" while it runs


def _kind(event: pb.AgentEvent) -> str:
    return event.WhichOneof("event") or ""


def check_events(events: Sequence[pb.AgentEvent], *, after: int, what: str) -> None:
    """Numbered after+1, after+2, … with no gap, one run, ending at its one terminal event."""
    sequences = [e.sequence for e in events]
    assert sequences == list(range(after + 1, after + 1 + len(events))), (what, sequences[:20])
    assert len({e.run_id for e in events}) <= 1, what
    kinds = [_kind(e) for e in events]
    if after == 0 and kinds:
        assert kinds[0] == "run_started", (what, kinds[:5])
    ends = [i for i, k in enumerate(kinds) if k in TERMINAL]
    assert ends in ([], [len(kinds) - 1]), (what, kinds[-5:])


def check_run_end(events: Sequence[pb.AgentEvent], request_text: str, what: str) -> None:
    """A run that failed says why in its own words (not "internal error", no class names)."""
    last = events[-1]
    if _kind(last) == "run_failed":
        error = last.run_failed.error
        assert not error.startswith("internal error"), f"{what}: run failed with {error!r}"
        assert not leaks(error, request_text), f"{what}: run failed with {error!r}"


# --- the world: a server, its database, the runs it holds ---------------------------------------


class World:
    """A running server, its SQLite file, and what the fuzz knows about the runs in it."""

    def __init__(self, server: Server, db_path: Path) -> None:
        self.server = server
        self.db_path = db_path
        # Our own channel: responses (ListRuns of runs with 256 KB instructions) may pass 4 MB.
        self.channel = grpc.aio.insecure_channel(
            server.address, options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)]
        )
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.runs: dict[str, KnownRun] = {}
        self.busy: KnownRun | None = None
        self.compaction_session = ""
        self.requests: Counter[str] = Counter()
        self.codes: Counter[str] = Counter()
        self.events: Counter[str] = Counter()
        self.helper_requests = 0
        self.started = time.monotonic()

    # -- calls

    async def call(
        self, rpc: Rpc, payload: bytes, *, deadline_s: float, until: Any = None
    ) -> Outcome:
        """One RPC under a deadline. A stream is read to its end or first error, or, with
        `until`, only until `until(message)` is true or nothing comes for LIVE_IDLE_S (a live
        run's stream does not end): then it is cancelled and the outcome is `live`."""
        if not rpc.streaming:
            unary = self.channel.unary_unary(rpc.path)
            try:
                response = await unary(payload, timeout=deadline_s)
            except grpc.aio.AioRpcError as err:
                return Outcome(err.code(), err.details() or "", [])
            return Outcome(Code.OK, "", [response])
        call = self.channel.unary_stream(rpc.path)(payload, timeout=deadline_s)
        received: list[bytes] = []
        try:
            while True:
                if until is None:
                    item = await call.read()
                else:
                    try:
                        item = await asyncio.wait_for(call.read(), LIVE_IDLE_S)
                    except TimeoutError:
                        call.cancel()
                        return Outcome(Code.OK, "", received, live=True)
                if item is grpc.aio.EOF:
                    return Outcome(Code.OK, "", received)
                received.append(item)
                if until is not None and until(item):
                    call.cancel()
                    return Outcome(Code.OK, "", received, live=True)
        except grpc.aio.AioRpcError as err:
            return Outcome(err.code(), err.details() or "", received)

    async def helper(
        self, rpc: Rpc, request: Message, *, deadline_s: float = CALL_TIMEOUT_S
    ) -> Outcome:
        self.helper_requests += 1
        return await self.call(rpc, request.SerializeToString(), deadline_s=deadline_s)

    # -- the database

    def row_counts(self) -> dict[str, int]:
        with contextlib.closing(
            sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=5)
        ) as db:
            names = [
                row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
            return {
                name: db.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in names
            }

    async def quiesce(self) -> None:
        """Wait until everything queued for the event log is committed (a run's steps are
        its only writes, and its terminal step is its last)."""
        await self.server.app.event_log.flush()

    # -- runs

    async def watch_to_end(self, run_id: str, what: str) -> list[pb.AgentEvent]:
        outcome = await self.helper(
            RPCS["WatchRunEvents"], pb.WatchRunEventsRequest(run_id=run_id), deadline_s=RUN_END_S
        )
        events = [pb.AgentEvent.FromString(b) for b in outcome.responses]
        if outcome.code == Code.DEADLINE_EXCEEDED:
            await self.cancel_straggler(run_id)
            pytest.fail(
                f"HANG: {what}: run {run_id} did not end within {RUN_END_S} s "
                f"(last events: {[_kind(e) for e in events[-3:]]})"
            )
        assert outcome.ok, (what, outcome.code, outcome.details)
        check_events(events, after=0, what=what)
        assert events and _kind(events[-1]) in TERMINAL, (what, [_kind(e) for e in events[-3:]])
        return events

    async def cancel_straggler(self, run_id: str) -> None:
        outcome = await self.helper(RPCS["CancelRun"], pb.CancelRunRequest(run_id=run_id))
        if outcome.code not in (Code.OK, Code.FAILED_PRECONDITION):
            pytest.fail(f"cannot cancel straggler {run_id}: {outcome.code} {outcome.details}")

    def remember(self, events: Sequence[pb.AgentEvent]) -> KnownRun:
        self.events.update(k for e in events if (k := _kind(e)) in NOTABLE_EVENTS)
        first, last = events[0], events[-1]
        run = KnownRun(
            run_id=first.run_id,
            session_id=first.run_started.session_id,
            last=last.sequence,
            end=_kind(last),
        )
        self.runs[run.run_id] = run
        return run

    async def start_busy(self) -> None:
        """A run that sleeps in its model call for ten minutes: live, and writing nothing."""
        request = create_request(script({"text": "zzz", "delay_ms": 600_000}), model="script")
        created = await self.helper(RPCS["CreateRun"], request)
        assert created.ok, (created.code, created.details)
        run_id = pb.CreateRunResponse.FromString(created.responses[0]).run_id
        self.helper_requests += 1
        outcome = await self.call(
            RPCS["WatchRunEvents"],
            pb.WatchRunEventsRequest(run_id=run_id).SerializeToString(),
            deadline_s=5.0,
            until=lambda item: _kind(pb.AgentEvent.FromString(item)) == "model_started",
        )
        events = [pb.AgentEvent.FromString(b) for b in outcome.responses]
        kinds = [_kind(e) for e in events]
        assert kinds[-1:] == ["model_started"], (outcome.code, outcome.details, kinds)
        self.busy = KnownRun(run_id, events[0].run_started.session_id, events[-1].sequence, "")
        await self.quiesce()

    async def seed(self) -> None:
        for request in (
            create_request("seed one two three"),
            create_request(script({"error": "bad_request"}), model="script"),
            create_request(
                script(
                    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]},
                    {"text": "forty two"},
                ),
                model="script",
            ),
        ):
            outcome = await self.helper(RPCS["CreateRunStream"], request)
            assert outcome.ok, (outcome.code, outcome.details)
            self.remember([pb.AgentEvent.FromString(b) for b in outcome.responses])
        # A cancelled one.
        await self.start_busy()
        assert self.busy is not None
        outcome = await self.helper(RPCS["CancelRun"], pb.CancelRunRequest(run_id=self.busy.run_id))
        assert outcome.ok, (outcome.code, outcome.details)
        self.remember(await self.watch_to_end(self.busy.run_id, "seed"))
        await self.start_busy()

    def known(self, run_id: str) -> KnownRun | None:
        if self.busy is not None and run_id == self.busy.run_id:
            return self.busy
        return self.runs.get(run_id)

    def run_ids(self) -> list[str]:
        ids = list(self.runs)[-12:]
        return [*ids, self.busy.run_id] if self.busy else ids

    def session_ids(self) -> list[str]:
        sessions = list(dict.fromkeys(r.session_id for r in self.runs.values()))[-8:]
        return [*sessions, self.busy.session_id] if self.busy else sessions

    async def busy_still_running(self) -> None:
        """After a mutating RPC: if the busy run was ended, wait for that and start another."""
        assert self.busy is not None
        got = await self.helper(RPCS["GetRun"], pb.GetRunRequest(run_id=self.busy.run_id))
        assert got.ok, (got.code, got.details)
        status = pb.GetRunResponse.FromString(got.responses[0]).run.status
        if status >= c.RUN_STATUS_COMPLETED:
            self.remember(await self.watch_to_end(self.busy.run_id, "busy run"))
            self.busy = None
            await self.start_busy()

    # -- the properties

    async def exchange(
        self,
        rpc: Rpc,
        request: Message | bytes,
        *,
        expect: frozenset[Code] | None = None,
        live: bool = False,
    ) -> Outcome:
        """Send one fuzzed request and check the four properties; returns what came back."""
        payload = request if isinstance(request, bytes) else request.SerializeToString()
        what = describe(rpc, request)
        request_text = payload.decode("utf-8", "replace")
        allowed = rpc.allowed | ({IA, RE} if isinstance(request, bytes) else set())
        if len(payload) > fs.MAX_RECEIVE_BYTES:  # the documented gRPC message size bound
            allowed, expect = allowed | {RE}, frozenset({RE})
        before = self.row_counts()
        self.requests[rpc.name] += 1
        outcome = await self.call(
            rpc, payload, deadline_s=CALL_TIMEOUT_S, until=(lambda _: False) if live else None
        )
        if outcome.code == Code.DEADLINE_EXCEEDED:
            await self.cleanup()
            pytest.fail(f"HANG: {what} did not answer within {CALL_TIMEOUT_S} s")
        self.codes["LIVE" if outcome.live else outcome.code.name] += 1
        # (1) an allowed status, never INTERNAL or UNKNOWN; the expected one where it is known.
        assert outcome.code not in (Code.INTERNAL, Code.UNKNOWN), (
            f"{what} -> {outcome.code.name} {outcome.details!r}"
        )
        assert outcome.code in allowed, f"{what} -> {outcome.code.name} {outcome.details!r}"
        if expect is not None:
            assert outcome.code in expect, (
                f"{what} -> {outcome.code.name} {outcome.details!r}; expected one of "
                f"{sorted(c.name for c in expect)}"
            )
        # (2) no class names, tracebacks or internals in the message.
        found = leaks(outcome.details, request_text)
        assert not found, f"{what} -> {outcome.code.name} {outcome.details!r} shows {found}"
        # An OK response decodes as the RPC's response type.
        try:
            outcome.responses = [rpc.response.FromString(b) for b in outcome.responses]
        except DecodeError as exc:
            pytest.fail(f"{what}: undecodable response ({exc})")
        # (3) a refused request wrote nothing.
        if not outcome.ok:
            after = self.row_counts()
            changed = {
                k: (before.get(k), after.get(k))
                for k in before.keys() | after.keys()
                if before.get(k) != after.get(k)
            }
            assert not changed, f"{what} -> {outcome.code.name} but wrote rows {changed}"
        else:
            await self.settle(rpc, payload, outcome, what, request_text)
        # (4) the server still answers.
        await self.assert_serving(what)
        return outcome

    async def settle(
        self, rpc: Rpc, payload: bytes, outcome: Outcome, what: str, request_text: str
    ) -> None:
        """After an OK mutating request: the runs it started have ended, the busy run runs."""
        if not rpc.mutating:
            return
        if rpc.name == "CreateRunStream":
            events = outcome.responses
            check_events(events, after=0, what=what)
            assert events and _kind(events[-1]) in TERMINAL, (what, [_kind(e) for e in events[-3:]])
            self.remember(events)
            check_run_end(events, request_text, what)
            check_echo(events, pb.CreateRunRequest.FromString(payload), what)
        elif rpc.name == "CreateRun":
            run_id = outcome.responses[0].run_id
            events = await self.watch_to_end(run_id, what)
            self.remember(events)
            check_run_end(events, request_text, what)
            check_echo(events, pb.CreateRunRequest.FromString(payload), what)
        await self.busy_still_running()
        await self.quiesce()

    async def assert_serving(self, what: str) -> None:
        self.helper_requests += 1
        try:
            response = await self.health.Check(
                health_pb2.HealthCheckRequest(service=""), timeout=5.0
            )
        except grpc.aio.AioRpcError as err:
            pytest.fail(f"server not answering after {what}: {err.code()} {err.details()}")
        assert response.status == health_pb2.HealthCheckResponse.SERVING, what

    async def cleanup(self) -> None:
        """After a hang: cancel every run except the busy one, so later examples start clean."""
        for run_id in self.run_ids():
            if self.busy is None or run_id != self.busy.run_id:
                with contextlib.suppress(Exception):
                    await self.helper(RPCS["CancelRun"], pb.CancelRunRequest(run_id=run_id))
        listed = await self.helper(RPCS["ListRuns"], pb.ListRunsRequest())
        if listed.ok:
            for run in pb.ListRunsResponse.FromString(listed.responses[0]).runs:
                if run.status < c.RUN_STATUS_COMPLETED and (
                    self.busy is None or run.id != self.busy.run_id
                ):
                    await self.helper(RPCS["CancelRun"], pb.CancelRunRequest(run_id=run.id))

    def report(self, test: str) -> None:
        total = sum(self.requests.values())
        per_rpc = ", ".join(f"{name} {n}" for name, n in sorted(self.requests.items()))
        print(
            f"\n[fuzz] {test}: {total} fuzzed requests ({per_rpc}); "
            f"{self.helper_requests} helper requests; {time.monotonic() - self.started:.1f} s; "
            f"answers: {dict(self.codes.most_common())}; events of runs: {dict(self.events)}"
        )


def check_echo(events: Sequence[pb.AgentEvent], request: pb.CreateRunRequest, what: str) -> None:
    """An echo run that completed answered with its input, exactly."""
    if request.model.value.strip() != "echo" or _kind(events[-1]) != "run_completed":
        return
    text = "".join(e.text_delta.delta for e in events if _kind(e) == "text_delta")
    assert text == request.input, f"{what}: echo answered {_short(text)}"


@pytest.fixture
async def world(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[World]:
    settings_ = fast_settings(tmp_path)
    server = await start_server(settings_)
    world = World(server, settings_.sqlite_path)
    try:
        await world.seed()
        yield world
        world.report(request.node.name)
    finally:
        await world.channel.close()
        await stop_server(server)


# --- id expectations ---------------------------------------------------------------------------


def canonical_uuid(value: str) -> str | None:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def id_expectation(world: World, raw: str, on_known: Any) -> frozenset[Code]:
    """What an RPC taking a run id must answer: a malformed id is INVALID_ARGUMENT, an unknown
    one NOT_FOUND, a known one `on_known(run)`. A spelling of a UUID other than its canonical
    form (upper case, braces, urn:) may be taken as that UUID or refused."""
    canonical = canonical_uuid(raw) if raw else None
    if canonical is None:
        return frozenset({IA})
    run = world.known(canonical)
    known = on_known(run) if run is not None else frozenset({NF})
    return known if raw == canonical else known | {IA}


def _is_live(run: KnownRun) -> bool:
    return not run.end


# --- raw bytes ---------------------------------------------------------------------------------

UNKNOWN_SESSION = "5e5510e0-0000-4000-8000-00000000f022"
STATIC_REQUESTS: dict[str, bytes] = {
    "CreateRun": create_request("hello fuzz").SerializeToString(),
    "CreateRunStream": create_request("hello fuzz").SerializeToString(),
    "ListRuns": pb.ListRunsRequest(
        status=c.RUN_STATUS_COMPLETED, pagination=c.Pagination(limit=5)
    ).SerializeToString(),
    "GetCompactionConfig": b"",
    "GetUsage": pb.GetUsageRequest(from_day="2026-01-01", to_day="2026-01-31").SerializeToString(),
    "UpdateCompactionConfig": pb.UpdateCompactionConfigRequest(
        auto=True,
        buffer_tokens=20_000,
        keep_tokens=8_000,
        tail_turns=2,
        circuit_breaker_threshold=3,
        provider="local",
        model="echo",
    ).SerializeToString(),
    "GetCircuitBreaker": b"",
    "ListSnapshots": b"",
    "ListSessions": spb.ListSessionsRequest(
        pagination=c.Pagination(limit=5, offset=1)
    ).SerializeToString(),
    # Sessions nobody made: mutated, they stay unknown (or malformed), so a DeleteSession
    # never erases the seeded runs the other tests rely on.
    "GetSession": spb.GetSessionRequest(session_id=UNKNOWN_SESSION).SerializeToString(),
    "ListSessionMessages": spb.ListSessionMessagesRequest(
        session_id=UNKNOWN_SESSION, from_position=2, limit=10
    ).SerializeToString(),
    "DeleteSession": spb.DeleteSessionRequest(session_id=UNKNOWN_SESSION).SerializeToString(),
    "ListTools": b"",
    "ListProviders": b"",
}


def valid_requests(world: World, rpc: Rpc) -> list[bytes]:
    """Valid encodings of `rpc`'s request, for mutations to start from."""
    static = STATIC_REQUESTS.get(rpc.name)
    if static is not None:
        return [static]
    requests = [rpc.request(run_id=run_id) for run_id in world.run_ids()]
    if rpc.name == "WatchRunEvents":
        for request in requests:
            request.last_event_id = 2  # type: ignore[attr-defined]
    if rpc.name == "ListRunEvents":
        for request in requests:
            request.after_sequence, request.limit = 2, 3  # type: ignore[attr-defined]
    return [r.SerializeToString() for r in requests]


def watches_busy(world: World, rpc: Rpc, payload: bytes) -> bool:
    """Whether `payload` is a WatchRunEvents of the busy run (a stream that does not end)."""
    if rpc.name != "WatchRunEvents" or world.busy is None:
        return False
    try:
        run_id = pb.WatchRunEventsRequest.FromString(payload).run_id
    except DecodeError:
        return False
    return canonical_uuid(run_id) == world.busy.run_id


@settings(FUZZ, max_examples=examples(260))
@given(rpc=st.sampled_from(sorted(RPCS)), spec=fs.raw_bytes())
async def test_raw_bytes_to_every_rpc(world: World, rpc: str, spec: fs.RawSpec) -> None:
    """Arbitrary bytes as the request body of each of the 25 RPCs."""
    payload = spec.build(valid_requests(world, RPCS[rpc]))
    await world.exchange(RPCS[rpc], payload, live=watches_busy(world, RPCS[rpc], payload))


# --- CreateRun / CreateRunStream ------------------------------------------------------------------

REQUEST_KEYS = ("fuzz-key-1", "fuzz-key-2", "\u043a\u043b\u044e\u0447-\U0001f511")
SIZES = (
    fs.MAX_INPUT_BYTES - 1,
    fs.MAX_INPUT_BYTES,
    fs.MAX_INPUT_BYTES + 1,
    1 << 20,
    fs.MAX_INPUT_BYTES,
    fs.MAX_RECEIVE_BYTES + 8,
)


@dataclass(frozen=True)
class CreateSpec:
    """A CreateRunRequest with its session drawn as an IdSpec (resolved against the server)."""

    fields: dict[str, Any]

    def build(self, world: World) -> pb.CreateRunRequest:
        fields = dict(self.fields)
        provider, model, session = (
            fields.pop("provider"),
            fields.pop("model"),
            fields.pop("session"),
        )
        request = pb.CreateRunRequest(
            provider=c.ProviderId(value=provider), model=c.ModelName(value=model), **fields
        )
        if session is not None:
            request.session_id = session.resolve(world.session_ids())
        return request


def _hi(text: str) -> str:
    return "hi " + text.replace("\x00", "")


# Each field of a CreateRunRequest: a benign value (a run that should complete) ...
BENIGN: dict[str, st.SearchStrategy[Any]] = {
    "provider": st.just("local"),
    "model": st.just("echo"),
    "input": fs.odd_text(40).map(_hi),
    "metadata": st.one_of(
        st.just(""), st.dictionaries(fs.unicode_text(8), fs.json_values, max_size=3).map(json.dumps)
    ),
    "tool_choice": st.sampled_from(("", "auto", "none")),
    "client_request_id": st.just(""),
    "instructions": st.one_of(st.just(""), fs.odd_text().map(_hi)),
    "tools": st.one_of(st.just([]), st.lists(st.sampled_from(fs.KNOWN_TOOLS), unique=True)),
    "max_iterations": st.sampled_from((0, 1, 10)),
    "session": st.one_of(st.none(), st.builds(fs.IdSpec, st.just("known"), st.integers(0, 63))),
}
# ... and an adversarial one.
ADVERSARIAL: dict[str, st.SearchStrategy[Any]] = {
    "provider": st.one_of(
        st.sampled_from((" local ", "LOCAL", "", "openai", "local\x00")),
        fs.odd_text(12),
        fs.huge_text((100_000,)),
    ),
    "model": st.one_of(
        st.sampled_from(("ECHO", " echo", "", "gpt-4o", "script")),
        fs.odd_text(8),
        fs.huge_text((100_000,)),
    ),
    "input": fs.adversarial_text(SIZES, 40),
    "metadata": fs.metadata(),
    "tool_choice": st.one_of(
        st.sampled_from(("required", *fs.KNOWN_TOOLS, "AUTO", " auto", "x")),
        fs.odd_text(12),
        fs.huge_text((100_000,)),
    ),
    "client_request_id": st.one_of(
        st.sampled_from(REQUEST_KEYS),
        fs.odd_text(16),
        st.builds(
            fs.of_bytes,
            st.sampled_from(fs.HUGE_PIECES),
            st.sampled_from((fs.MAX_REQUEST_ID_BYTES, fs.MAX_REQUEST_ID_BYTES + 1)),
        ),
    ),
    "instructions": fs.adversarial_text(SIZES),
    "tools": st.one_of(
        st.lists(
            st.one_of(st.sampled_from((*fs.KNOWN_TOOLS, "", " ", "nope")), fs.odd_text(8)),
            min_size=1,
            max_size=4,
        ),
        st.integers(127, 130).map(lambda n: [f"t{i}" for i in range(n)]),
        st.just(list(fs.KNOWN_TOOLS) * 2),
        fs.huge_text((100_000,)).map(lambda name: [name]),
    ),
    "max_iterations": st.sampled_from((1000, 1001, 2**31, 2**32 - 1)),
    "session": fs.ids(),
}


def create_specs() -> st.SearchStrategy[CreateSpec]:
    """Requests with up to three adversarial fields, the others benign."""

    def build(adversarial: frozenset[str]) -> st.SearchStrategy[CreateSpec]:
        fields = {k: (ADVERSARIAL if k in adversarial else BENIGN)[k] for k in BENIGN}
        return st.builds(CreateSpec, st.fixed_dictionaries(fields))

    return st.frozensets(st.sampled_from(sorted(BENIGN)), max_size=3).flatmap(build)


def must_be_invalid(request: pb.CreateRunRequest) -> bool:
    """Whether docs/OPERATIONS.md makes this CreateRun request INVALID_ARGUMENT for sure."""
    bounded = {
        "input": fs.MAX_INPUT_BYTES,
        "metadata": fs.MAX_METADATA_BYTES,
        "client_request_id": fs.MAX_REQUEST_ID_BYTES,
    }
    if any(len(getattr(request, name).encode()) > limit for name, limit in bounded.items()):
        return True
    if any("\x00" in getattr(request, name) for name in (*bounded, "instructions")):
        return True
    if not request.input.strip() or request.provider.value.strip() != "local":
        return True
    if request.model.value.strip() not in ("echo", "script"):
        return True
    if request.session_id and canonical_uuid(request.session_id) is None:
        return True
    if request.metadata and not is_json_object(request.metadata):
        return True
    if any(name not in fs.KNOWN_TOOLS for name in request.tools):
        return True
    choice = request.tool_choice
    return choice not in ("", "auto", "none", "required", *(request.tools or fs.KNOWN_TOOLS))


def is_json_object(text: str) -> bool:
    """Whether `text` may be a JSON object (RFC 8259: no NaN or Infinity; numbers of any size).

    Undecided texts count as objects: too deep for Python's parser, or with a leading BOM
    (which RFC 8259 lets a parser ignore).
    """

    def no_constant(name: str) -> Any:
        raise ValueError(name)

    if text.startswith("\ufeff"):
        return True
    try:
        value = json.loads(
            text, parse_constant=no_constant, parse_int=lambda _: 0, parse_float=lambda _: 0.0
        )
    except RecursionError:
        return True
    except ValueError:
        return False
    return isinstance(value, dict)


def create_expectation(world: World, request: pb.CreateRunRequest) -> frozenset[Code]:
    """INVALID_ARGUMENT when the docs say so; an unknown session is NOT_FOUND and the busy
    run's session ABORTED (or INVALID_ARGUMENT / ALREADY_EXISTS, whichever is checked first)."""
    if must_be_invalid(request):
        return frozenset({IA})
    session = request.session_id
    if session and canonical_uuid(session) == session:
        if world.busy is not None and session == world.busy.session_id:
            return frozenset({AB, IA, AE})
        if session not in {run.session_id for run in world.runs.values()}:
            return frozenset({NF, IA, AE})
    return _CREATE


@settings(FUZZ, max_examples=examples(220))
@given(spec=create_specs(), rpc=st.sampled_from(("CreateRun", "CreateRunStream")))
async def test_create_run_with_adversarial_fields(world: World, spec: CreateSpec, rpc: str) -> None:
    """CreateRun and CreateRunStream (echo model) with every field adversarial."""
    request = spec.build(world)
    outcome = await world.exchange(RPCS[rpc], request, expect=create_expectation(world, request))
    if outcome.ok and request.session_id:
        # The run went on the session it named.
        if rpc == "CreateRun":
            session = outcome.responses[0].session_id
        else:
            session = outcome.responses[0].run_started.session_id
        assert session == canonical_uuid(request.session_id), describe(RPCS[rpc], request)


@settings(FUZZ, max_examples=examples(110))
@given(
    text=fs.script_input(),
    tools=st.sampled_from(((), ("calculator",), fs.KNOWN_TOOLS)),
    max_iterations=st.sampled_from((0, 1, 3)),
    rpc=st.sampled_from(("CreateRun", "CreateRunStream")),
)
async def test_script_runs_end_quickly(
    world: World, text: str, tools: tuple[str, ...], max_iterations: int, rpc: str
) -> None:
    """The `script` model with adversarial scripts: refused, or a run that ends by itself
    within RUN_END_S with a plain message (absurd delays, counts and Retry-After included)."""
    request = create_request(text, model="script")
    request.tools.extend(tools)
    request.max_iterations = max_iterations
    await world.exchange(RPCS[rpc], request, expect=frozenset({Code.OK, IA}))


# --- reads, cancel, watch, list -----------------------------------------------------------------

CURSORS = ("absolute", "zero", "last - 1", "last", "last + 1")


@settings(FUZZ, max_examples=examples(260))
@given(
    rpc=st.sampled_from(
        ("GetRun", "GetRunOutput", "CancelRun", "WatchRunEvents", "WatchRunEvents", "ListRuns")
    ),
    run=fs.ids(),
    cursor=st.tuples(st.sampled_from(CURSORS), fs.uint64()),
    session=st.one_of(st.none(), fs.ids()),
    status=st.one_of(st.just(0), fs.enum_value()),
    page=st.one_of(st.none(), st.tuples(fs.uint32(), fs.uint32())),
)
async def test_run_reads_and_cancel(
    world: World,
    rpc: str,
    run: fs.IdSpec,
    cursor: tuple[str, int],
    session: fs.IdSpec | None,
    status: int,
    page: tuple[int, int] | None,
) -> None:
    """GetRun, GetRunOutput, CancelRun, WatchRunEvents and ListRuns with adversarial ids,
    cursors, filters and pages."""
    if rpc == "ListRuns":
        await list_runs(world, session, status, page)
        return
    raw = run.resolve(world.run_ids())
    if rpc == "WatchRunEvents":
        await watch(world, raw, cursor)
        return
    on_known = {
        "GetRun": lambda run: frozenset({Code.OK}),
        "GetRunOutput": lambda run: frozenset({FP if _is_live(run) else Code.OK}),
        # Cancelling a cancelled run again is OK; a run that ended otherwise is refused.
        "CancelRun": lambda run: frozenset(
            {Code.OK} if _is_live(run) else {FP, Code.OK} if run.end == "run_cancelled" else {FP}
        ),
    }[rpc]
    outcome = await world.exchange(
        RPCS[rpc], RPCS[rpc].request(run_id=raw), expect=id_expectation(world, raw, on_known)
    )
    canonical = canonical_uuid(raw) if raw else None
    if outcome.ok and rpc == "GetRun":
        assert outcome.responses[0].run.id == canonical
    if outcome.ok and rpc == "GetRunOutput":
        assert outcome.responses[0].output.run_id == canonical


async def watch(world: World, raw: str, cursor_spec: tuple[str, int]) -> None:
    canonical = canonical_uuid(raw) if raw else None
    run = world.known(canonical or "")
    how, absolute = cursor_spec
    last = run.last if run is not None else 0
    cursor = {
        "absolute": absolute,
        "zero": 0,
        "last - 1": max(0, last - 1),
        "last": last,
        "last + 1": last + 1,
    }[how]
    request = pb.WatchRunEventsRequest(run_id=raw, last_event_id=cursor)

    def on_known(known: KnownRun) -> frozenset[Code]:
        if _is_live(known):
            return frozenset({Code.OK})
        return frozenset({OOR if cursor > known.last else Code.OK})

    live = run is not None and _is_live(run)
    outcome = await world.exchange(
        RPCS["WatchRunEvents"], request, expect=id_expectation(world, raw, on_known), live=live
    )
    if outcome.ok and run is not None and not live:
        # A finished run's events after the cursor, exactly, ending at its terminal event.
        what = describe(RPCS["WatchRunEvents"], request)
        check_events(outcome.responses, after=cursor, what=what)
        sequences = [e.sequence for e in outcome.responses]
        assert sequences == list(range(cursor + 1, run.last + 1)), what


async def list_runs(
    world: World, session_spec: fs.IdSpec | None, status: int, page: tuple[int, int] | None
) -> None:
    session = session_spec.resolve(world.session_ids()) if session_spec else ""
    request = pb.ListRunsRequest(session_id=session, status=status)  # type: ignore[arg-type]
    if page is not None:
        request.pagination.limit, request.pagination.offset = page
    limit = request.pagination.limit or 100
    sure_invalid = (
        limit > 100 or not 0 <= status <= 9 or (bool(session) and canonical_uuid(session) is None)
    )
    expect = frozenset({IA}) if sure_invalid else None
    outcome = await world.exchange(RPCS["ListRuns"], request, expect=expect)
    if outcome.ok:
        runs = outcome.responses[0].runs
        what = describe(RPCS["ListRuns"], request)
        assert len(runs) <= limit, what
        if status:
            assert all(r.status == status for r in runs), what
        if session and canonical_uuid(session) == session:
            assert all(r.session_id == session for r in runs), what


# --- compaction and snapshots -------------------------------------------------------------------

CONFIG_FIELDS = (
    "auto",
    "prune",
    "buffer_tokens",
    "keep_tokens",
    "tail_turns",
    "model",
    "provider",
    "circuit_breaker_threshold",
)
TOKENS = (0, 1, 2, 999_999_999, 10**9, 2**53, 2**63 - 1, 2**63, 2**64 - 1)
PROVIDER_MODEL = (
    ("", ""),
    ("local", "echo"),
    ("local", "script"),
    ("local", ""),
    ("", "echo"),
    ("nope", "echo"),
    ("local", "nope"),
    (" local", "echo "),
    ("local\x00", "echo"),
)


@settings(FUZZ, max_examples=examples(240))
@given(
    rpc=st.sampled_from(
        (
            "GetCompactionConfig",
            "UpdateCompactionConfig",
            "UpdateCompactionConfig",
            "UpdateCompactionConfig",
            "GetCircuitBreaker",
            "ListSnapshots",
            "GetSnapshot",
            "GetSnapshot",
            "DeleteSnapshot",
            "DeleteSnapshot",
            "CreateRunStream",
        )
    ),
    run=fs.ids(),
    lines=st.sampled_from((1, 50, 2_000, 4_000)),
    config=st.builds(
        pb.UpdateCompactionConfigRequest,
        auto=st.booleans(),
        prune=st.booleans(),
        buffer_tokens=st.one_of(st.integers(1, 10**6), st.sampled_from(TOKENS), fs.uint64()),
        keep_tokens=st.one_of(st.integers(1, 10**6), st.sampled_from(TOKENS), fs.uint64()),
        tail_turns=st.one_of(st.integers(1, 100), fs.uint32()),
        circuit_breaker_threshold=st.one_of(st.integers(1, 100), fs.uint32()),
    ),
    provider_model=st.one_of(
        st.sampled_from(PROVIDER_MODEL), st.tuples(fs.odd_text(12), fs.odd_text(12))
    ),
    # One of them 100 KB long, a third of the time.
    oversize=st.tuples(
        st.sampled_from(("", "", "", "", "provider", "model")), st.sampled_from(fs.HUGE_PIECES)
    ),
    unknown_fields=st.binary(max_size=8),
)
async def test_compaction_and_snapshot_services(
    world: World,
    rpc: str,
    run: fs.IdSpec,
    config: pb.UpdateCompactionConfigRequest,
    provider_model: tuple[str, str],
    oversize: tuple[str, str],
    unknown_fields: bytes,
    lines: int,
) -> None:
    """CompactionService (extreme values; the config round-trips, and runs under it end well)
    and SnapshotService."""
    if rpc == "CreateRunStream":
        await run_under_compaction(world, lines)
        return
    if rpc == "UpdateCompactionConfig":
        config.provider, config.model = provider_model
        field, piece = oversize
        if field:
            setattr(config, field, fs.of_bytes(piece, 100_000))
        await update_compaction(world, config)
        return
    if rpc in ("GetSnapshot", "DeleteSnapshot"):
        raw = run.resolve(world.run_ids())
        on_known = {
            "GetSnapshot": lambda run: frozenset({Code.OK if _is_live(run) else NF}),
            # The busy run executes here: its snapshot cannot be deleted under it.
            "DeleteSnapshot": lambda run: frozenset({FP if _is_live(run) else NF}),
        }[rpc]
        outcome = await world.exchange(
            RPCS[rpc], RPCS[rpc].request(run_id=raw), expect=id_expectation(world, raw, on_known)
        )
        if outcome.ok and rpc == "GetSnapshot":
            assert outcome.responses[0].snapshot.run_id == canonical_uuid(raw)
        return
    # The empty requests, with unknown fields (field 16 upwards) the server must skip.
    payload = fs.varint(16 << 3 | 2) + fs.varint(len(unknown_fields)) + unknown_fields
    outcome = await world.exchange(RPCS[rpc], payload, expect=frozenset({Code.OK}))
    if rpc == "ListSnapshots":
        listed = {s.run_id for s in outcome.responses[0].snapshots}
        assert world.busy is not None and listed == {world.busy.run_id}, listed


async def update_compaction(world: World, request: pb.UpdateCompactionConfigRequest) -> None:
    before = await world.helper(RPCS["GetCompactionConfig"], pb.GetCompactionConfigRequest())
    assert before.ok, (before.code, before.details)
    provider, model = request.provider, request.model
    sure_invalid = bool(provider) != bool(model) or (bool(provider) and provider.strip() != "local")
    expect = frozenset({IA}) if sure_invalid else None
    outcome = await world.exchange(RPCS["UpdateCompactionConfig"], request, expect=expect)
    after = await world.helper(RPCS["GetCompactionConfig"], pb.GetCompactionConfigRequest())
    assert after.ok, (after.code, after.details)
    stored = pb.GetCompactionConfigResponse.FromString(after.responses[0])
    what = describe(RPCS["UpdateCompactionConfig"], request)
    if outcome.ok:
        # The whole config is replaced by what was sent.
        for name in CONFIG_FIELDS:
            sent, got = getattr(request, name), getattr(stored, name)
            if isinstance(sent, str):
                sent, got = sent.strip(), got.strip()
            assert got == sent, (what, name, got)
    else:
        assert stored == pb.GetCompactionConfigResponse.FromString(before.responses[0]), what


async def run_under_compaction(world: World, lines: int) -> None:
    """An echo run on one growing session, under whatever config the fuzz set last: up to
    128 KB per run, so the transcript soon passes the compaction threshold (half the local
    model's 128,000-token window at the least)."""
    text = "\n".join(f"line {i} of a transcript that grows" for i in range(lines))
    request = create_request(text)
    if world.compaction_session:
        request.session_id = world.compaction_session
    outcome = await world.exchange(RPCS["CreateRunStream"], request, expect=frozenset({Code.OK}))
    world.compaction_session = outcome.responses[0].run_started.session_id


# --- JSON at the extremes, where clients put it --------------------------------------------------

JSON_PLACES = (
    "metadata, nested",
    "metadata, a number",
    "script, nested steps",
    "script, nested tool arguments",
    "script, delay_ms",
    "script, retry_after_s",
    "script, deltas",
)


def json_request(place: str, depth: int, shape: str, pick: int) -> pb.CreateRunRequest:
    """A request with deep JSON or an absurd number (the `pick`-th for that place) in it."""
    nested = fs.nested(depth, shape)
    numbers = {
        "script, delay_ms": fs.ABSURD_DELAYS_MS,
        "script, retry_after_s": fs.ABSURD_RETRY_AFTER_S,
        "script, deltas": fs.ABSURD_DELTAS,
    }.get(place, ())
    numbers = (*fs.EXTREME_NUMBERS, *numbers)
    number = numbers[pick % len(numbers)]
    match place:
        case "metadata, nested":
            return create_request("hello", metadata='{"deep": ' + nested + "}")
        case "metadata, a number":
            return create_request("hello", metadata='{"n": ' + number + "}")
        case "script, nested steps":
            text = '{"steps": [' + nested + "]}"
        case "script, nested tool arguments":
            call = '{"name": "calculator", "arguments": ' + json.dumps(nested) + "}"
            text = '{"steps": [{"tool_calls": [' + call + "]}]}"
        case "script, delay_ms":
            text = '{"steps": [{"text": "a b", "delay_ms": ' + number + "}]}"
        case "script, retry_after_s":
            text = '{"steps": [{"error": "rate_limited", "retry_after_s": ' + number + "}]}"
        case _:
            text = '{"steps": [{"deltas": ' + number + "}]}"
    return create_request(text, model="script")


@settings(FUZZ, max_examples=examples(80))
@given(
    place=st.sampled_from(JSON_PLACES),
    depth=st.sampled_from(fs.NESTING),
    shape=st.sampled_from(("array", "object", "mixed")),
    pick=st.integers(0, 63),
    rpc=st.sampled_from(("CreateRun", "CreateRunStream")),
)
async def test_json_at_the_extremes(
    world: World, place: str, depth: int, shape: str, pick: int, rpc: str
) -> None:
    """Deep nesting (up to 3,000 levels) and numbers beyond any bound (1e309, NaN, Infinity,
    4,301 digits, …) in metadata and in scripts: INVALID_ARGUMENT, or accepted and then a run
    that ends by itself quickly with a plain message — never INTERNAL, a hang or a class name."""
    request = json_request(place, depth, shape, pick)
    expect = frozenset({IA}) if not is_json_object(request.metadata or "{}") else None
    await world.exchange(RPCS[rpc], request, expect=expect)
