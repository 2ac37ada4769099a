"""A history checker for fault tests: what was stored, what every watcher saw, how runs ended.

A fault test records, per watcher, every connection it made (the cursor it sent) and every
event it received on it, and how each connection ended; after the runs have ended it reads
every run's stored log from 0 (`read_stored`) and hands both to `History.check`, which checks:

- every run's stored sequences are exactly 1..N, every event names its run;
- the first event is run_started; exactly one terminal event, and it is the last;
- every event has a valid W3C trace_id (32 lowercase hex, not all zeros) and span_id (16
  lowercase hex, not all zeros); all events of one run share one trace_id;
- what every watcher received, concatenated over its reconnections, equals the stored log
  after its first cursor: same events, same order, no gap, no duplicate, up to the terminal
  event (a watcher marked `abandoned` needs only a prefix of that);
- each reconnection sent the last sequence received before it as its cursor;
- a stream that ended by itself (status OK) had delivered the terminal event; one that ended
  with an error status did so only where the test expected it (`Connection.expected_error`);
- GetRun's status matches the terminal event (run_completed → RUN_STATUS_COMPLETED, …);
- every CancelRun reply matches how the run ended: OK (with status RUN_STATUS_CANCELLED) only
  if it ended run_cancelled, FAILED_PRECONDITION only if it ended run_completed / run_failed.

It is about sequences, terminals and watchers, not text: a model call repeated after a crash
(a second model_started of the same iteration) is fine here.

`check` collects every problem and raises one AssertionError listing them (first ones first),
each naming the run, the watcher (and connection) and the sequence.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import grpc

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc

TERMINAL_STATUS: dict[str, c.RunStatus.ValueType] = {
    "run_completed": c.RUN_STATUS_COMPLETED,
    "run_failed": c.RUN_STATUS_FAILED,
    "run_cancelled": c.RUN_STATUS_CANCELLED,
}
TERMINAL = frozenset(TERMINAL_STATUS)

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")
# How many problems an AssertionError lists before "… and N more".
MAX_LISTED = 40


def kind(event: pb.AgentEvent) -> str:
    return event.WhichOneof("event") or ""


def status_name(status: int) -> str:
    for name, value in c.RunStatus.items():
        if value == status:
            return name
    return f"RunStatus({status})"


def describe(event: pb.AgentEvent) -> str:
    """`#7 text_delta` — short enough for an assertion message."""
    return f"#{event.sequence} {kind(event)}"


def _ids(events: Iterable[pb.AgentEvent]) -> str:
    shown = [describe(e) for e in events]
    if len(shown) > 6:
        shown = [*shown[:3], "…", *shown[-2:]]
    return "[" + ", ".join(shown) + "]"


# --- what clients did ---------------------------------------------------------------------


@dataclass
class Connection:
    """One stream a watcher opened: the cursor it sent and what came back."""

    cursor: int
    received: list[pb.AgentEvent] = field(default_factory=list)
    # "open" until closed: "client" (the watcher hung up), "eof" (the stream ended with OK),
    # or "error:<StatusCode name>".
    end: str = "open"
    # The test expected this connection to fail (e.g. its server was killed with SIGKILL).
    expected_error: bool = False


@dataclass
class Watcher:
    """A client following one run, across reconnections."""

    name: str
    run_id: str = ""  # may be learnt from the first event (CreateRunStream)
    connections: list[Connection] = field(default_factory=list)
    # The test gave up on this watcher before the terminal event: a prefix is enough.
    abandoned: bool = False

    def connect(self, cursor: int | None = None) -> Connection:
        """Record a new connection; `cursor` defaults to the last sequence seen so far."""
        if self.connections and self.connections[-1].end == "open":
            raise RuntimeError(f"watcher {self.name}: connect while a connection is open")
        connection = Connection(self.last_sequence if cursor is None else cursor)
        self.connections.append(connection)
        return connection

    def receive(self, event: pb.AgentEvent) -> None:
        if not self.run_id:
            self.run_id = event.run_id
        self.connections[-1].received.append(event)

    def close(self, end: str, *, expected_error: bool = False) -> None:
        """End the open connection: "client", "eof" or "error:<name>" (see Connection.end)."""
        connection = self.connections[-1]
        if connection.end == "open":
            connection.end = end
            connection.expected_error = expected_error

    def close_with(self, error: grpc.aio.AioRpcError, *, expected: bool = False) -> None:
        self.close(f"error:{error.code().name}", expected_error=expected)

    @property
    def events(self) -> list[pb.AgentEvent]:
        return [event for connection in self.connections for event in connection.received]

    @property
    def last_sequence(self) -> int:
        for connection in reversed(self.connections):
            if connection.received:
                return connection.received[-1].sequence
        return self.connections[0].cursor if self.connections else 0

    @property
    def done(self) -> bool:
        """True once the terminal event has been received."""
        for connection in reversed(self.connections):
            if connection.received:
                return kind(connection.received[-1]) in TERMINAL
        return False

    @property
    def reconnections(self) -> int:
        return max(0, len(self.connections) - 1)


@dataclass(frozen=True)
class CancelReply:
    """What CancelRun answered: its status code and, when OK, CancelRunResponse.status."""

    run_id: str
    code: grpc.StatusCode
    status: int = c.RUN_STATUS_UNSPECIFIED
    details: str = ""


@dataclass(frozen=True)
class Summary:
    runs: int
    events: int
    watchers: int
    connections: int
    reconnections: int
    cancels: int
    terminals: dict[str, int]

    def __str__(self) -> str:
        ends = ", ".join(f"{k}={v}" for k, v in sorted(self.terminals.items()))
        return (
            f"{self.runs} runs ({ends}), {self.events} events, {self.watchers} watchers, "
            f"{self.connections} connections ({self.reconnections} reconnections), "
            f"{self.cancels} cancels"
        )


class History:
    """Everything the clients of a fault test did and saw."""

    def __init__(self, label: str = "") -> None:
        self.label = label
        self.watchers: list[Watcher] = []
        self.cancels: list[CancelReply] = []

    def watcher(self, name: str, run_id: str = "") -> Watcher:
        watcher = Watcher(name, run_id)
        self.watchers.append(watcher)
        return watcher

    def record_cancel(
        self,
        run_id: str,
        *,
        reply: pb.CancelRunResponse | None = None,
        error: grpc.aio.AioRpcError | None = None,
    ) -> None:
        """Record a CancelRun's outcome: its reply, or the error it raised."""
        if error is not None:
            self.cancels.append(CancelReply(run_id, error.code(), details=error.details() or ""))
        else:
            status = reply.status if reply is not None else c.RUN_STATUS_UNSPECIFIED
            self.cancels.append(CancelReply(run_id, grpc.StatusCode.OK, status))

    def check(
        self,
        logs: Mapping[str, Sequence[pb.AgentEvent]],
        runs: Mapping[str, pb.RunRecord],
    ) -> Summary:
        """Check everything (see the module docstring); raise AssertionError listing problems.

        `logs`: every run's stored log, read from 0 after it ended; `runs`: GetRun's record.
        """
        __tracebackhide__ = True  # the message says it all; the arguments are huge
        problems: list[str] = []
        for run_id, log in logs.items():
            problems += check_log(run_id, log)
            record = runs.get(run_id)
            if record is None:
                problems.append(f"run {run_id}: no GetRun record given")
            elif log and kind(log[-1]) in TERMINAL:
                want = TERMINAL_STATUS[kind(log[-1])]
                if record.status != want:
                    problems.append(
                        f"run {run_id}: GetRun status {status_name(record.status)} but the log "
                        f"ends with {describe(log[-1])} (expected {status_name(want)})"
                    )
        for watcher in self.watchers:
            problems += check_watcher(watcher, logs)
        for reply in self.cancels:
            problems += check_cancel(reply, logs)
        if problems:
            head = f"{self.label}: " if self.label else ""
            listed = problems[:MAX_LISTED]
            more = len(problems) - len(listed)
            raise AssertionError(
                f"{head}{len(problems)} history problem(s):\n  "
                + "\n  ".join(listed)
                + (f"\n  … and {more} more" if more else "")
            )
        terminals = Counter(kind(log[-1]) for log in logs.values() if log)
        return Summary(
            runs=len(logs),
            events=sum(len(log) for log in logs.values()),
            watchers=len(self.watchers),
            connections=sum(len(w.connections) for w in self.watchers),
            reconnections=sum(w.reconnections for w in self.watchers),
            cancels=len(self.cancels),
            terminals=dict(terminals),
        )


# --- the checks -----------------------------------------------------------------------------


def check_log(run_id: str, log: Sequence[pb.AgentEvent]) -> list[str]:
    """A stored log on its own: 1..N, run_started first, one terminal last, trace ids."""
    where = f"run {run_id}"
    if not log:
        return [f"{where}: the stored log is empty"]
    problems = []
    sequences = [event.sequence for event in log]
    if sequences != list(range(1, len(log) + 1)):
        problems.append(f"{where}: stored sequences are not 1..{len(log)}: {_gaps(sequences)}")
    for event in log:
        if event.run_id != run_id:
            problems.append(f"{where} {describe(event)}: carries run_id {event.run_id!r}")
    if kind(log[0]) != "run_started":
        problems.append(f"{where}: the first event is {describe(log[0])}, not run_started")
    terminals = [event for event in log if kind(event) in TERMINAL]
    if len(terminals) != 1:
        problems.append(f"{where}: {len(terminals)} terminal events {_ids(terminals)}, not 1")
    if kind(log[-1]) not in TERMINAL:
        problems.append(f"{where}: the last event {describe(log[-1])} is not terminal")
    for event in log:
        problems += _check_trace(where, event)
    trace_ids = Counter(event.trace_id for event in log)
    if len(trace_ids) > 1:
        first = log[0].trace_id
        other = next(e for e in log if e.trace_id != first)
        problems.append(
            f"{where}: {len(trace_ids)} trace ids in one run; {describe(log[0])} has {first}, "
            f"{describe(other)} has {other.trace_id}"
        )
    return problems


def _check_trace(where: str, event: pb.AgentEvent) -> list[str]:
    problems = []
    if not _TRACE_ID.fullmatch(event.trace_id) or set(event.trace_id) == {"0"}:
        problems.append(f"{where} {describe(event)}: invalid trace_id {event.trace_id!r}")
    if not _SPAN_ID.fullmatch(event.span_id) or set(event.span_id) == {"0"}:
        problems.append(f"{where} {describe(event)}: invalid span_id {event.span_id!r}")
    return problems


def _gaps(sequences: Sequence[int]) -> str:
    """Where a list of sequences first departs from 1, 2, 3, …, and its repeats."""
    notes = []
    for i, sequence in enumerate(sequences):
        if sequence != i + 1:
            notes.append(f"position {i} has #{sequence} (expected #{i + 1})")
            break
    repeats = sorted(s for s, n in Counter(sequences).items() if n > 1)
    if repeats:
        notes.append(f"repeated {repeats[:10]}")
    return "; ".join(notes) or "?"


def check_watcher(watcher: Watcher, logs: Mapping[str, Sequence[pb.AgentEvent]]) -> list[str]:
    """What one watcher received, over all its connections, against the stored log."""
    where = f"watcher {watcher.name}"
    if not watcher.connections:
        return [f"{where}: never connected"]
    if not watcher.run_id:
        return [f"{where}: never learnt its run (no event received)"]
    where = f"{where} (run {watcher.run_id})"
    log = logs.get(watcher.run_id)
    if log is None:
        return [f"{where}: no stored log for its run"]
    problems = []
    by_sequence = {event.sequence: event for event in log}
    # Each connection on its own: the cursor it sent, how it ended.
    seen = watcher.connections[0].cursor
    for number, connection in enumerate(watcher.connections):
        at = f"{where} connection {number} (cursor {connection.cursor})"
        if connection.cursor != seen:
            problems.append(
                f"{at}: the test reconnected with cursor {connection.cursor}, but had "
                f"received up to #{seen}"
            )
        if connection.received:
            seen = connection.received[-1].sequence
        last = connection.received[-1] if connection.received else None
        finished = last is not None and kind(last) in TERMINAL
        if connection.end == "eof" and not finished:
            after = describe(last) if last is not None else "nothing"
            problems.append(f"{at}: the stream ended OK after {after}, before the terminal event")
        if connection.end.startswith("error:") and not connection.expected_error:
            problems.append(f"{at}: the stream failed with {connection.end[6:]}")
        if connection.end == "open" and not finished and not watcher.abandoned:
            problems.append(f"{at}: still open, and no terminal event was received")
    # Everything received, concatenated, against the log after the first cursor.
    first = watcher.connections[0].cursor
    expected = list(log[first:]) if first <= len(log) else []
    if first > len(log):
        problems.append(f"{where}: first cursor {first} is beyond the stored log (#{len(log)})")
    received = [(n, e) for n, conn in enumerate(watcher.connections) for e in conn.received]
    for i, (number, event) in enumerate(received):
        at = f"{where} connection {number}"
        if i >= len(expected):
            problems.append(
                f"{at}: received {describe(event)} beyond the end of the stored log "
                f"(#{len(log)}); duplicate or phantom"
            )
            break
        want = expected[i]
        if event.sequence != want.sequence:
            problem = "duplicate" if event.sequence < want.sequence else "gap"
            problems.append(
                f"{at}: {problem}: received {describe(event)} where the log has "
                f"{describe(want)} next (after cursor {first}, item {i})"
            )
            break
        if event != want:
            stored = by_sequence.get(event.sequence)
            problems.append(
                f"{at}: received {describe(event)} differs from the stored "
                f"{describe(stored) if stored is not None else '(none)'}: "
                f"{_diff(event, want)}"
            )
            break
    else:
        if len(received) < len(expected) and not watcher.abandoned:
            missing = expected[len(received)]
            problems.append(
                f"{where}: received {len(received)} events after cursor {first}, the log has "
                f"{len(expected)}: first missing {describe(missing)}"
            )
    return problems


def _diff(got: pb.AgentEvent, want: pb.AgentEvent) -> str:
    fields = [
        d.name
        for d in pb.AgentEvent.DESCRIPTOR.fields
        if getattr(got, d.name) != getattr(want, d.name)
    ]
    return "fields " + ", ".join(fields or ["?"])


def check_cancel(reply: CancelReply, logs: Mapping[str, Sequence[pb.AgentEvent]]) -> list[str]:
    """A CancelRun reply against how its run ended."""
    log = logs.get(reply.run_id)
    where = f"run {reply.run_id}: CancelRun answered {reply.code.name}"
    if not log or kind(log[-1]) not in TERMINAL:
        return [f"{where}, but the run has no terminal event to compare with"]
    end = kind(log[-1])
    if reply.code == grpc.StatusCode.OK:
        problems = []
        if end != "run_cancelled":
            problems.append(f"{where} but the run ended {describe(log[-1])}")
        if reply.status != c.RUN_STATUS_CANCELLED:
            problems.append(
                f"{where} with CancelRunResponse.status {status_name(reply.status)}, "
                f"not RUN_STATUS_CANCELLED (the run ended {describe(log[-1])})"
            )
        return problems
    if reply.code == grpc.StatusCode.FAILED_PRECONDITION:
        if end == "run_cancelled":
            return [f"{where} ({reply.details!r}) but the run ended {describe(log[-1])}"]
        return []
    return [f"{where} ({reply.details!r}); expected OK or FAILED_PRECONDITION"]


# --- reading ---------------------------------------------------------------------------------


async def events_of(call: grpc.aio.UnaryStreamCall) -> AsyncIterator[pb.AgentEvent]:
    """A stream's events through `call.read()` (so a first event read before still counts:
    grpc does not let one call mix read() and iteration)."""
    while True:
        event = await call.read()
        if event is grpc.aio.EOF:
            return
        assert isinstance(event, pb.AgentEvent)
        yield event


async def read_connection(
    call: grpc.aio.UnaryStreamCall,
    watcher: Watcher,
    *,
    after_events: int = 0,
    after_s: float | None = None,
    on_event: Callable[[pb.AgentEvent], None] | None = None,
) -> grpc.aio.AioRpcError | None:
    """Read one connection of `watcher` until its stream ends, or the watcher hangs up after
    `after_events` events or `after_s` seconds, and record how it ended ("eof", "client").
    An RPC error is returned for the caller to record (it knows whether it was expected)."""
    count = 0
    try:
        async with asyncio.timeout(after_s):
            async for event in events_of(call):
                watcher.receive(event)
                if on_event is not None:
                    on_event(event)
                count += 1
                if after_events and count >= after_events and not watcher.done:
                    break
            else:
                watcher.close("eof")
        watcher.close("client")
    except TimeoutError:
        watcher.close("client")
    except grpc.aio.AioRpcError as exc:
        return exc
    finally:
        call.cancel()
    return None


# --- reading what was stored ------------------------------------------------------------------


async def read_stored(
    stub: rpc.RunServiceStub, run_ids: Iterable[str], *, parallel: int = 16
) -> tuple[dict[str, list[pb.AgentEvent]], dict[str, pb.RunRecord]]:
    """Every run's whole stored log (WatchRunEvents from 0) and its GetRun record.

    Call it once the runs have ended: a log is read to its terminal event.
    """
    gate = asyncio.Semaphore(parallel)
    logs: dict[str, list[pb.AgentEvent]] = {}
    records: dict[str, pb.RunRecord] = {}

    async def read(run_id: str) -> None:
        async with gate:
            request = pb.WatchRunEventsRequest(run_id=run_id, last_event_id=0)
            logs[run_id] = [event async for event in stub.WatchRunEvents(request)]
            records[run_id] = (await stub.GetRun(pb.GetRunRequest(run_id=run_id))).run

    await asyncio.gather(*(read(run_id) for run_id in dict.fromkeys(run_ids)))
    return logs, records
