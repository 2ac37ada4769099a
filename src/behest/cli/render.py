"""How the `behest` command shows a run's events on a terminal, as they stream."""

from __future__ import annotations

from typing import TextIO

from behest.cli.formats import EXIT_OK, EXIT_RUN_NOT_COMPLETED, by, code, plural, shorten, until
from behest.client import (
    ApprovalRequested,
    ApprovalResolved,
    BudgetExceeded,
    ClientToolAnswered,
    ClientToolRequested,
    CompactionCircuitOpened,
    Decision,
    DoomLoopDetected,
    Event,
    ModelStarted,
    OutputRejected,
    ReasoningDelta,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    SubRunFinished,
    SubRunStarted,
    TextDelta,
    ToolCallCompleted,
    ToolExecutionFinished,
)


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

    def render(self, event: Event) -> None:
        """Print one event."""
        self.run_id = event.run_id or self.run_id
        self.last_sequence = max(self.last_sequence, event.sequence)
        data = event.data
        if isinstance(data, ReasoningDelta):
            self._think(data.delta)
            return
        if self._thinking:
            self._think_end()
        match data:
            case RunStarted(session_id=session_id):
                print(f"run {event.run_id}  session {session_id}", file=self.err)
                self.err.flush()
            case ModelStarted(iteration=iteration):
                if iteration in self._iterations:
                    # The model call is repeated (retry or resume): its partial text is void.
                    self._line("[retrying model call]")
                self._iterations.add(iteration)
            case TextDelta(delta=text):
                self._write(text)
            case ToolCallCompleted(call=call):
                self._line(f"→ tool {call.name}({shorten(call.arguments)})")
            case ToolExecutionFinished():
                how = "failed" if data.is_error else "finished"
                self._line(f"← {data.tool_name} {how} in {data.duration_ms} ms")
            case DoomLoopDetected(description=description):
                self._line(f"! doom loop detected: {description}")
            case CompactionCircuitOpened(consecutive_failures=failures):
                self._line(f"! compaction circuit opened after {failures} failures")
            case ApprovalRequested() | ApprovalResolved():
                self._render_approval(event.run_id, data)
            case ClientToolRequested() | ClientToolAnswered():
                self._render_client_tool(event.run_id, data)
            case RunCompleted() | RunFailed() | RunCancelled():
                self._render_end(data)
            case BudgetExceeded():
                self._line(
                    f"! budget exceeded: {data.budget.name.lower()} {data.used} of {data.limit}"
                )
            case SubRunStarted(child_run_id=child):
                self._line(f"→ sub-agent run {child} started")
            case SubRunFinished(child_run_id=child, status=status):
                self._line(f"← sub-agent run {child} {status.name.lower()}")
            case OutputRejected():
                then = "; asking the model once more" if data.repairing else ""
                self._line(f"! answer rejected: {data.error}{then}")
            case _:
                # Bookkeeping events, and kinds newer than this CLI: nothing to show.
                pass

    def _render_end(self, data: RunCompleted | RunFailed | RunCancelled) -> None:
        """The terminal event, and the exit code it gives."""
        match data:
            case RunCompleted(finish_reason=reason, iterations=iterations):
                self._line(
                    f"✓ completed ({reason.name.lower()}, {plural(iterations, 'iteration')})"
                )
                self.exit_code = EXIT_OK
            case RunFailed():
                self._line(f"✗ failed{code(data.code)}: {data.error}")
                self.exit_code = EXIT_RUN_NOT_COMPLETED
            case RunCancelled():
                why = f": {data.reason}" if data.reason else ""
                self._line(f"✗ cancelled{by(data.cancelled_by)}{why}")
                self.exit_code = EXIT_RUN_NOT_COMPLETED

    def _render_approval(self, run_id: str, data: ApprovalRequested | ApprovalResolved) -> None:
        """An approval request (with how to decide it), and how it was decided."""
        if isinstance(data, ApprovalResolved):
            self._line(resolution(data))
            return
        call = data.call
        self._line(
            f"? {call.name}({shorten(call.arguments)}) waits for approval "
            f"(call {call.id}{until(data.expires_at)})"
        )
        if self.approval_hints:
            self._hint(f"to decide: behest approve {run_id} {call.id} [--deny REASON] [--always]")

    def _render_client_tool(
        self, run_id: str, data: ClientToolRequested | ClientToolAnswered
    ) -> None:
        """A client tool call (with how to answer it), and its answer."""
        if isinstance(data, ClientToolAnswered):
            if data.timed_out:
                self._line(f"← {data.tool_name} timed out: the client sent no result")
            else:
                how = " with an error" if data.is_error else ""
                self._line(f"← {data.tool_name} answered{how}{by(data.answered_by)}")
            return
        call = data.call
        self._line(
            f"? {call.name}({shorten(call.arguments)}) waits for the client's result "
            f"(call {call.id}{until(data.expires_at)})"
        )
        self._hint(
            f"the client runs it and answers: behest answer {run_id} {call.id} "
            "--output TEXT [--error]"
        )

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


_DECISIONS = {
    Decision.ALLOW: "allowed",
    Decision.ALLOW_ALWAYS: "allowed for the rest of the session",
    Decision.DENY: "denied",
}


def resolution(resolved: ApprovalResolved) -> str:
    """How an approval request was decided, as a line."""
    decision = resolved.decision
    if decision == Decision.TIMED_OUT:
        return f"✗ {resolved.tool_name} denied: nobody decided in time"
    allowed = decision in (Decision.ALLOW, Decision.ALLOW_ALWAYS)
    how = _DECISIONS.get(decision, f"decided ({decision})")
    why = f": {resolved.reason}" if resolved.reason and not allowed else ""
    return f"{'✓' if allowed else '✗'} {resolved.tool_name} {how}{by(resolved.decided_by)}{why}"
