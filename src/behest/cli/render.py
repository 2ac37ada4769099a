"""How the `behest` command shows a run's events on a terminal, as they stream."""

from __future__ import annotations

from typing import TextIO

from behest import wording
from behest.cli.formats import EXIT_OK, EXIT_RUN_NOT_COMPLETED
from behest.cli.questions import fits, how_to_reply
from behest.client import Event, ModelStarted, ReasoningDelta, RunStarted, TextDelta

# The kinds the terminal shows, each as its line (behest/wording.py, which the inspector's
# timeline shows too); the others are bookkeeping, and kinds newer than this CLI.
SHOWN = frozenset(
    {
        "tool_call_completed",
        "tool_execution_finished",
        "doom_loop_detected",
        "compaction_circuit_opened",
        "approval_requested",
        "approval_resolved",
        "client_tool_requested",
        "client_tool_answered",
        "run_completed",
        "run_failed",
        "run_cancelled",
        "budget_exceeded",
        "sub_run_started",
        "sub_run_finished",
        "output_rejected",
        "tool_outcome_unknown",
        "tool_execution_reconciled",
        "tool_retry_scheduled",
        "handoff",
        "elicitation_requested",
        "elicitation_answered",
        "tool_progress",
    }
)
# The exit code each terminal event gives.
EXIT_CODES = {
    "run_completed": EXIT_OK,
    "run_failed": EXIT_RUN_NOT_COMPLETED,
    "run_cancelled": EXIT_RUN_NOT_COMPLETED,
}


class EventPrinter:
    """Renders a run's events for a terminal: text inline, tools and outcome on their lines.

    A call the run waits for is shown with how to answer it (on `err`): `behest answer` for
    a client tool, `behest approve` for an approval and `behest reply` for a tool's question
    unless `approval_hints` is off (the command asks at the terminal instead). The model's
    reasoning goes to `err`, after "thinking: " (dimmed on a terminal), so `out` carries the
    answer alone."""

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
        if isinstance(data, RunStarted):
            agent = f"  agent {data.agent_name}@{data.agent_version}" if data.agent_name else ""
            print(f"run {event.run_id}  session {data.session_id}{agent}", file=self.err)
            self.err.flush()
        elif isinstance(data, ModelStarted):
            if data.iteration in self._iterations:
                # The model call is repeated (retry or resume): its partial text is void.
                self._line("[retrying model call]")
            self._iterations.add(data.iteration)
        elif isinstance(data, TextDelta):
            self._write(data.delta)
        elif event.kind in SHOWN and (said := wording.line(event.kind, data)) is not None:
            self._line(said)
            self._hint_for(event.kind, event.run_id, data)
            self.exit_code = EXIT_CODES.get(event.kind, self.exit_code)

    def _hint_for(self, kind: str, run_id: str, data: object) -> None:
        """How to answer a call the run waits for."""
        if kind == "tool_outcome_unknown":
            execution = getattr(data, "execution_id", "")
            self._hint(
                f"to reconcile: behest reconcile {execution} --ran OUTPUT [--error] | "
                "--did-not-run | --give-up [--reason TEXT]"
            )
            return
        if kind == "elicitation_requested" and self.approval_hints:
            self._hint(fits(getattr(data, "requested_schema", "")))
            self._hint(f"to reply: {how_to_reply(run_id, getattr(data, 'elicitation_id', ''))}")
            return
        call = getattr(data, "call", None)
        if call is None:
            return
        if kind == "approval_requested" and self.approval_hints:
            self._hint(f"to decide: behest approve {run_id} {call.id} [--deny REASON] [--always]")
        elif kind == "client_tool_requested":
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
