"""How the `behest` command shows runs and their events on a terminal."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC
from typing import TextIO

from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp

from behest._proto.agent.v1 import catalog_pb2, common_pb2, run_pb2, session_pb2

# Long tool arguments would drown the answer's text; the full call is in the event log.
MAX_ARGUMENTS_SHOWN = 200
# The command's exit codes a run's end gives (see cli.py for the others).
EXIT_OK = 0
EXIT_RUN_NOT_COMPLETED = 1


class EventPrinter:
    """Renders a run's events for a terminal: text inline, tools and outcome on their lines.

    A call the run waits for is shown with how to answer it (on `err`): `behest answer` for
    a client tool, `behest approve` for an approval unless `approval_hints` is off (the
    command asks at the terminal instead). The model's reasoning goes to `err`, after
    "thinking: " (dimmed on a terminal), so `out` carries the answer alone."""

    def __init__(self, out: TextIO, err: TextIO, *, approval_hints: bool = True) -> None:
        self.out = out
        self.err = err
        self.approval_hints = approval_hints
        self.run_id = ""
        self.last_sequence = 0
        self.exit_code: int | None = None  # set by the terminal event
        self._iterations: set[int] = set()
        self._at_line_start = True
        self._thinking = False  # a line of reasoning is open on `err`

    def render(self, event: run_pb2.AgentEvent) -> None:
        """Print one event."""
        self.run_id = event.run_id or self.run_id
        self.last_sequence = max(self.last_sequence, event.sequence)
        kind = event.WhichOneof("event")
        if kind == "reasoning_delta":
            self._think(event.reasoning_delta.delta)
            return
        if self._thinking:
            self._think_end()
        match kind:
            case "run_started":
                started = event.run_started
                print(f"run {event.run_id}  session {started.session_id}", file=self.err)
                self.err.flush()
            case "model_started":
                iteration = event.model_started.iteration
                if iteration in self._iterations:
                    # The model call is repeated (retry or resume): its partial text is void.
                    self._line("[retrying model call]")
                self._iterations.add(iteration)
            case "text_delta":
                self._write(event.text_delta.delta)
            case "tool_call_completed":
                call = event.tool_call_completed.call
                self._line(f"→ tool {call.name}({_shorten(call.arguments)})")
            case "tool_execution_finished":
                done = event.tool_execution_finished
                how = "failed" if done.is_error else "finished"
                self._line(f"← {done.tool_name} {how} in {done.duration_ms} ms")
            case "doom_loop_detected":
                self._line(f"! doom loop detected: {event.doom_loop_detected.description}")
            case "compaction_circuit_opened":
                failures = event.compaction_circuit_opened.consecutive_failures
                self._line(f"! compaction circuit opened after {failures} failures")
            case (
                "approval_requested"
                | "approval_resolved"
                | "client_tool_requested"
                | "client_tool_answered"
            ):
                self._render_wait(event)
            case "run_completed":
                completed = event.run_completed
                reason = _reason(completed.finish_reason)
                self._line(f"✓ completed ({reason}, {_plural(completed.iterations, 'iteration')})")
                self.exit_code = EXIT_OK
            case "run_failed":
                failed = event.run_failed
                self._line(f"✗ failed{_code(failed.code)}: {failed.error}")
                self.exit_code = EXIT_RUN_NOT_COMPLETED
            case "run_cancelled":
                cancelled = event.run_cancelled
                why = f": {cancelled.reason}" if cancelled.reason else ""
                self._line(f"✗ cancelled{_by(cancelled.cancelled_by)}{why}")
                self.exit_code = EXIT_RUN_NOT_COMPLETED
            case "budget_exceeded" | "sub_run_started" | "sub_run_finished":
                self._render_spend(event)
            case "output_rejected":
                rejected = event.output_rejected
                then = "; asking the model once more" if rejected.repairing else ""
                self._line(f"! answer rejected: {rejected.error}{then}")
            case _:
                # Bookkeeping events, and kinds newer than this CLI: nothing to show.
                pass

    def _render_wait(self, event: run_pb2.AgentEvent) -> None:
        """The events of a run that waits: requests (with how to answer) and their answers."""
        match event.WhichOneof("event"):
            case "approval_requested":
                request = event.approval_requested
                call = request.call
                self._line(
                    f"? {call.name}({_shorten(call.arguments)}) waits for approval "
                    f"(call {call.id}{_until(request.expires_at)})"
                )
                if self.approval_hints:
                    self._hint(
                        f"to decide: behest approve {event.run_id} {call.id} "
                        "[--deny REASON] [--always]"
                    )
            case "approval_resolved":
                self._line(_resolution(event.approval_resolved))
            case "client_tool_requested":
                asked = event.client_tool_requested
                call = asked.call
                self._line(
                    f"? {call.name}({_shorten(call.arguments)}) waits for the client's result "
                    f"(call {call.id}{_until(asked.expires_at)})"
                )
                self._hint(
                    f"the client runs it and answers: behest answer {event.run_id} {call.id} "
                    "--output TEXT [--error]"
                )
            case "client_tool_answered":
                answered = event.client_tool_answered
                if answered.timed_out:
                    self._line(f"← {answered.tool_name} timed out: the client sent no result")
                else:
                    how = " with an error" if answered.is_error else ""
                    self._line(f"← {answered.tool_name} answered{how}{_by(answered.answered_by)}")

    def _render_spend(self, event: run_pb2.AgentEvent) -> None:
        """Budgets that ran out, and sub-agent runs."""
        match event.WhichOneof("event"):
            case "budget_exceeded":
                over = event.budget_exceeded
                name = run_pb2.BudgetKind.Name(over.budget).removeprefix("BUDGET_KIND_").lower()
                self._line(f"! budget exceeded: {name} {over.used} of {over.limit}")
            case "sub_run_started":
                self._line(f"→ sub-agent run {event.sub_run_started.child_run_id} started")
            case "sub_run_finished":
                done = event.sub_run_finished
                status = common_pb2.RunStatus.Name(done.status).removeprefix("RUN_STATUS_")
                self._line(f"← sub-agent run {done.child_run_id} {status.lower()}")

    def _think(self, text: str) -> None:
        if not self._thinking:
            self._thinking = True
            if not self._at_line_start:
                self._write("\n")
            text = "thinking: " + text
        dim = _isatty(self.err)
        self.err.write(f"\033[2m{text}\033[0m" if dim else text)
        self.err.flush()

    def _think_end(self) -> None:
        self._thinking = False
        self.err.write("\n")
        self.err.flush()

    def _hint(self, text: str) -> None:
        print(f"  {text}", file=self.err)
        self.err.flush()

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
            self._at_line_start = text.endswith("\n")

    def _line(self, text: str) -> None:
        self._write(("" if self._at_line_start else "\n") + text + "\n")


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _code(code: run_pb2.FailureCode.ValueType) -> str:
    """A failure code as the CLI shows it, e.g. " [budget_exceeded]" (none when unset)."""
    if not code:
        return ""
    return f" [{run_pb2.FailureCode.Name(code).removeprefix('FAILURE_CODE_').lower()}]"


def format_pending(calls: Sequence[run_pb2.PendingCall]) -> str:
    """A table of the calls a run waits for, one line each."""
    rows = [("CALL", "WAITS FOR", "TOOL", "EXPIRES", "ARGUMENTS")]
    rows += [
        (
            c.call.id,
            _kind(c.kind),
            c.call.name,
            _time(c.expires_at),
            _shorten(c.call.arguments),
        )
        for c in calls
    ]
    return _table(rows)


def format_runs(runs: Sequence[run_pb2.RunRecord]) -> str:
    """A table of runs, one line each."""
    rows = [("RUN", "STATUS", "MODEL", "CREATED", "SESSION")]
    rows += [
        (
            r.id,
            status_name(r.status),
            f"{r.provider.value}/{r.model.value}",
            _time(r.created_at),
            r.session_id,
        )
        for r in runs
    ]
    return _table(rows)


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    """Aligned columns; the last one is not padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    )


def format_run(run: run_pb2.RunRecord) -> str:
    """One run, a field per line."""
    fields = [
        ("run", run.id),
        ("session", run.session_id),
        ("status", status_name(run.status)),
        ("model", f"{run.provider.value}/{run.model.value}"),
        ("metadata", run.metadata or "-"),
        ("created", _time(run.created_at)),
        ("updated", _time(run.updated_at)),
    ]
    if run.client_tools:
        fields.append(("client tools", ", ".join(t.name for t in run.client_tools)))
    if run.approval_required_tools:
        fields.append(("approvals", ", ".join(run.approval_required_tools)))
    if run.approve_side_effects:
        fields.append(("approvals", "every tool not marked read-only"))
    fields += _spend_fields(run)
    width = max(9, *(len(name) for name, _ in fields))
    text = "\n".join(f"{name:<{width}} {value}" for name, value in fields)
    if run.status == common_pb2.RUN_STATUS_WAITING_FOR_INPUT:
        text += f"\n\nthe run waits for answers; see them with: behest pending {run.id}"
    return text


def _spend_fields(run: run_pb2.RunRecord) -> list[tuple[str, str]]:
    """What a run spent, how it failed, whose sub-agent it is."""
    fields = [("tokens", str(run.total_usage.total_tokens))]
    if run.HasField("total_cost"):
        fields.append(("cost", f"{run.total_cost.amount} {run.total_cost.currency}"))
    if run.error:
        fields.append(("error", f"{run.error}{_code(run.failure_code)}"))
    if run.parent_run_id:
        fields.append(("parent", run.parent_run_id))
    return fields


def format_output(output: run_pb2.RunOutput) -> str:
    """A finished run's summary, then the text of the messages it committed."""
    reason = _reason(output.finish_reason)
    usage = output.total_usage
    lines = [
        f"run {output.run_id}  session {output.session_id}",
        f"{reason}, {_plural(output.iterations, 'iteration')}, "
        f"{usage.input_tokens} in + {usage.output_tokens} out tokens"
        + (
            f", {output.total_cost.amount} {output.total_cost.currency}"
            if output.HasField("total_cost")
            else ""
        ),
    ]
    for message in output.messages:
        text = "".join(part.text.text for part in message.content if part.HasField("text"))
        calls = [f"→ tool {c.name}({_shorten(c.arguments)})" for c in message.tool_calls]
        lines += ["", f"[{message.role}]", *([text] if text else []), *calls]
    return "\n".join(lines)


def format_sessions(sessions: Sequence[session_pb2.SessionRecord]) -> str:
    """A table of sessions, one line each."""
    rows = [("SESSION", "RUNS", "MESSAGES", "CREATED", "UPDATED", "ACTIVE RUN")]
    rows += [
        (
            s.id,
            str(s.run_count),
            str(s.message_count),
            _time(s.created_at),
            _time(s.updated_at),
            s.active_run_id or "-",
        )
        for s in sessions
    ]
    return _table(rows)


def format_session(session: session_pb2.SessionRecord) -> str:
    """One session, a field per line."""
    fields = [
        ("session", session.id),
        ("runs", str(session.run_count)),
        ("messages", str(session.message_count)),
        ("created", _time(session.created_at)),
        ("updated", _time(session.updated_at)),
        ("active run", session.active_run_id or "-"),
    ]
    return "\n".join(f"{name:<10} {value}" for name, value in fields)


def format_message(message: common_pb2.Message) -> str:
    """A transcript message: its role (and the call a tool result answers), text, calls."""
    text = "".join(part.text.text for part in message.content if part.HasField("text"))
    head = f"[{message.role}]"
    if message.tool_call_id:
        head += f" {message.tool_name} ({message.tool_call_id})"
    calls = [f"→ tool {c.name}({_shorten(c.arguments)})" for c in message.tool_calls]
    return "\n".join([head, *([text] if text else []), *calls])


def format_event(event: run_pb2.AgentEvent) -> str:
    """One stored event on a line: its sequence, kind and payload (long ones shortened)."""
    kind = event.WhichOneof("event") or "unknown"
    body = json_format.MessageToDict(
        getattr(event, kind) if kind != "unknown" else event, preserving_proto_field_name=True
    )
    payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")) if body else ""
    return f"{event.sequence:>6}  {_time(event.timestamp)}  {kind}  {_shorten(payload)}".rstrip()


def format_tools(tools: Sequence[catalog_pb2.ToolInfo]) -> str:
    """A table of tools: source, what the loop may do with each, timeout, description."""
    rows = [("TOOL", "SOURCE", "FLAGS", "TIMEOUT", "DESCRIPTION")]
    rows += [
        (
            t.spec.name,
            t.source,
            _flags(t),
            f"{t.timeout_s:g} s" if t.timeout_s else "-",
            _first_line(t.spec.description),
        )
        for t in tools
    ]
    return _table(rows)


def _flags(tool: catalog_pb2.ToolInfo) -> str:
    names = ("read_only", "concurrency_safe", "idempotent", "requires_approval")
    return ",".join(name for name in names if getattr(tool, name)) or "-"


def format_providers(providers: Sequence[catalog_pb2.ProviderInfo]) -> str:
    """A table of providers' models, with limits and prices per million tokens."""
    rows = [("PROVIDER", "TYPE", "MODEL", "CONTEXT", "MAX OUTPUT", "PRICES IN/OUT PER 1M")]
    for provider in providers:
        default = provider.default_model
        for model in provider.models or [catalog_pb2.ModelInfo()]:
            name = model.name.value or "(any)"
            rows.append(
                (
                    provider.id.value,
                    provider.type,
                    name + (" (default)" if name == default else ""),
                    str(model.context_window) if model.context_window else "-",
                    str(model.max_output_tokens) if model.max_output_tokens else "-",
                    _prices(model),
                )
            )
    return _table(rows)


def _prices(model: catalog_pb2.ModelInfo) -> str:
    if not model.input_price:
        return "-"
    return f"{model.input_price} / {model.output_price} {model.currency}"


def _first_line(text: str) -> str:
    return _shorten(text.strip().split("\n", 1)[0])


STATUSES = [
    name.removeprefix("RUN_STATUS_").lower()
    for name in common_pb2.RunStatus.keys()
    if name != "RUN_STATUS_UNSPECIFIED"
]


def status_name(value: common_pb2.RunStatus.ValueType) -> str:
    try:
        return common_pb2.RunStatus.Name(value).removeprefix("RUN_STATUS_").lower()
    except ValueError:
        return str(value)  # a value newer than this CLI


def _kind(value: run_pb2.PendingCallKind.ValueType) -> str:
    if value == run_pb2.PENDING_CALL_KIND_APPROVAL:
        return "approval"
    if value == run_pb2.PENDING_CALL_KIND_CLIENT_TOOL:
        return "client result"
    return str(value)  # a kind newer than this CLI


_DECISIONS = {
    run_pb2.APPROVAL_DECISION_ALLOW: "allowed",
    run_pb2.APPROVAL_DECISION_ALLOW_ALWAYS: "allowed for the rest of the session",
    run_pb2.APPROVAL_DECISION_DENY: "denied",
}


def _resolution(resolved: run_pb2.ApprovalResolvedEvent) -> str:
    """How an approval request was decided, as a line."""
    decision = resolved.decision
    if decision == run_pb2.APPROVAL_DECISION_TIMED_OUT:
        return f"✗ {resolved.tool_name} denied: nobody decided in time"
    allowed = decision in (run_pb2.APPROVAL_DECISION_ALLOW, run_pb2.APPROVAL_DECISION_ALLOW_ALWAYS)
    how = _DECISIONS.get(decision, f"decided ({decision})")
    why = f": {resolved.reason}" if resolved.reason and not allowed else ""
    return f"{'✓' if allowed else '✗'} {resolved.tool_name} {how}{_by(resolved.decided_by)}{why}"


def _by(principal: str) -> str:
    return f" by {principal}" if principal else ""


def _until(ts: Timestamp) -> str:
    return f", until {_time(ts)}" if ts.seconds or ts.nanos else ""


def _reason(value: common_pb2.FinishReason.ValueType) -> str:
    try:
        return common_pb2.FinishReason.Name(value).removeprefix("FINISH_REASON_").lower()
    except ValueError:
        return str(value)


def _time(ts: Timestamp) -> str:
    if not ts.seconds and not ts.nanos:
        return "-"
    return ts.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _shorten(text: str) -> str:
    if len(text) <= MAX_ARGUMENTS_SHOWN:
        return text
    return text[: MAX_ARGUMENTS_SHOWN - 1] + "…"


def format_usage(usage: run_pb2.GetUsageResponse) -> str:
    """A table of days: runs, tokens (input, cached, output) and cost; then the total."""
    rows = [("DAY", "RUNS", "TOKENS", "INPUT", "CACHED", "OUTPUT", "COST")]
    for day in usage.days:
        rows.append((day.day, str(day.runs), *_tokens(day.usage), _cost(day.cost)))
    rows.append(("total", "", *_tokens(usage.total_usage), _cost(usage.total_cost)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _tokens(usage: common_pb2.TokenUsage) -> tuple[str, str, str, str]:
    cached = usage.cached_input_tokens + usage.cache_write_tokens
    return (
        str(usage.total_tokens),
        str(usage.input_tokens),
        str(cached),
        str(usage.output_tokens),
    )


def _cost(cost: common_pb2.Cost) -> str:
    return f"{cost.amount} {cost.currency}" if cost.amount else "-"
