"""The CLI's rendering of run events and run records, without a server: wire messages read by
the client's converter, as they arrive from a server, then written by the CLI."""

from __future__ import annotations

import io
import os
from typing import Any

from behest._proto.agent.v1 import common_pb2, run_pb2
from behest.cli import formats
from behest.cli.render import EventPrinter
from behest.client import Output, Run
from behest.client._wire import event_of, output_of, run_of

Payload = dict[str, Any]  # {oneof field name of AgentEvent: its message}

# `behest run` and `behest watch` exit with these after the run's terminal event.
EXIT_COMPLETED = os.EX_OK
EXIT_NOT_COMPLETED = 1  # the run failed or was cancelled


def events(*payloads: Payload, run_id: str = "run-1") -> list[run_pb2.AgentEvent]:
    """AgentEvents numbered from 1; each payload is {oneof field name: message}."""
    return [run_pb2.AgentEvent(sequence=i, run_id=run_id, **p) for i, p in enumerate(payloads, 1)]


def render(evs: list[run_pb2.AgentEvent]) -> tuple[str, str, EventPrinter]:
    out, err = io.StringIO(), io.StringIO()
    printer = EventPrinter(out, err)
    for event in evs:
        printer.render(event_of(event))
    return out.getvalue(), err.getvalue(), printer


def started(session: str = "sess-1") -> Payload:
    return {"run_started": run_pb2.RunStartedEvent(session_id=session, provider="local")}


def model(iteration: int) -> Payload:
    return {"model_started": run_pb2.ModelStartedEvent(iteration=iteration)}


def text(delta: str) -> Payload:
    return {"text_delta": run_pb2.TextDeltaEvent(delta=delta)}


def completed(
    iterations: int = 1, reason: common_pb2.FinishReason.ValueType = common_pb2.FINISH_REASON_STOP
) -> Payload:
    return {"run_completed": run_pb2.RunCompletedEvent(finish_reason=reason, iterations=iterations)}


def test_text_run_prints_text_inline_then_the_outcome() -> None:
    out, err, printer = render(
        events(
            started(),
            {"context_built": run_pb2.ContextBuiltEvent(message_count=1)},
            model(1),
            text("hello "),
            text("world"),
            {"assistant_message_committed": run_pb2.AssistantMessageCommittedEvent()},
            {"usage_recorded": run_pb2.UsageRecordedEvent()},
            completed(),
        )
    )
    assert out == "hello world\n✓ completed (stop, 1 iteration)\n"
    assert err == "run run-1  session sess-1\n"
    assert printer.exit_code == EXIT_COMPLETED
    assert printer.run_id == "run-1"
    assert printer.last_sequence == 8


def test_tool_calls_and_executions_get_their_own_lines() -> None:
    call = common_pb2.ToolCall(id="c1", name="calculator", arguments='{"expression": "1+2"}')
    out, _, _ = render(
        events(
            started(),
            model(1),
            text("Let me compute."),
            {
                "tool_call_started": run_pb2.ToolCallStartedEvent(
                    call_id="c1", tool_name="calculator"
                )
            },
            {"tool_call_delta": run_pb2.ToolCallDeltaEvent(call_id="c1", delta='{"expr')},
            {"tool_call_completed": run_pb2.ToolCallCompletedEvent(call=call)},
            {"tool_execution_started": run_pb2.ToolExecutionStartedEvent(call_id="c1")},
            {
                "tool_execution_finished": run_pb2.ToolExecutionFinishedEvent(
                    call_id="c1", tool_name="calculator", duration_ms=12
                )
            },
            model(2),
            text("It is 3."),
            completed(2),
        )
    )
    assert out == (
        "Let me compute.\n"
        '→ tool calculator({"expression": "1+2"})\n'
        "← calculator finished in 12 ms\n"
        "It is 3.\n"
        "✓ completed (stop, 2 iterations)\n"
    )


def test_repeated_model_started_marks_a_retry() -> None:
    out, _, _ = render(
        events(model(1), text("partial"), model(1), text("full answer"), completed())
    )
    assert out == "partial\n[retrying model call]\nfull answer\n✓ completed (stop, 1 iteration)\n"


def test_a_new_iteration_is_not_a_retry() -> None:
    out, _, _ = render(events(model(1), model(2)))
    assert "retrying" not in out


def test_failed_run_prints_the_error_and_exits_1() -> None:
    failed = run_pb2.RunFailedEvent(error="provider 'local': unavailable (503)")
    out, _, printer = render(events(model(1), text("so far"), {"run_failed": failed}))
    assert out == "so far\n✗ failed: provider 'local': unavailable (503)\n"
    assert printer.exit_code == EXIT_NOT_COMPLETED


def test_cancelled_run_exits_1() -> None:
    out, _, printer = render(events({"run_cancelled": run_pb2.RunCancelledEvent()}))
    assert out == "✗ cancelled\n"
    assert printer.exit_code == EXIT_NOT_COMPLETED


def test_no_terminal_event_leaves_the_exit_code_unset() -> None:
    _, _, printer = render(events(started(), model(1), text("x")))
    assert printer.exit_code is None


def test_doom_loop_and_circuit_breaker_are_shown() -> None:
    out, _, _ = render(
        events(
            {"doom_loop_detected": run_pb2.DoomLoopDetectedEvent(description="clock thrice")},
            {
                "compaction_circuit_opened": run_pb2.CompactionCircuitOpenedEvent(
                    consecutive_failures=3
                )
            },
        )
    )
    assert (
        out == "! doom loop detected: clock thrice\n! compaction circuit opened after 3 failures\n"
    )


def test_length_finish_reason_is_named() -> None:
    out, _, _ = render(events(completed(reason=common_pb2.FINISH_REASON_LENGTH)))
    assert out == "✓ completed (length, 1 iteration)\n"


def test_long_tool_arguments_are_shortened() -> None:
    call = common_pb2.ToolCall(id="c", name="write", arguments='"' + "x" * 1000 + '"')
    out, _, _ = render(events({"tool_call_completed": run_pb2.ToolCallCompletedEvent(call=call)}))
    assert out.endswith("…)\n")
    assert len(out) < 300


def record(run_id: str, status: common_pb2.RunStatus.ValueType) -> run_pb2.RunRecord:
    rec = run_pb2.RunRecord(
        id=run_id,
        session_id="sess-1",
        status=status,
        provider=common_pb2.ProviderId(value="local"),
        model=common_pb2.ModelName(value="echo"),
        metadata='{"k": 1}',
    )
    rec.created_at.FromSeconds(1_700_000_000)
    return rec


def format_runs(records: list[run_pb2.RunRecord]) -> str:
    return formats.format_runs([run_of(r) for r in records])


def format_run(record: run_pb2.RunRecord) -> str:
    run: Run = run_of(record)
    return formats.format_run(run)


def format_output(output: run_pb2.RunOutput) -> str:
    read: Output = output_of(output)
    return formats.format_output(read)


def test_format_runs_is_an_aligned_table() -> None:
    table = format_runs(
        [
            record("r-long-id", common_pb2.RUN_STATUS_WAITING_FOR_TOOLS),
            record("r2", common_pb2.RUN_STATUS_COMPLETED),
        ]
    ).splitlines()
    assert table[0].split() == ["RUN", "STATUS", "MODEL", "CREATED", "SESSION"]
    assert table[1].split() == [
        "r-long-id",
        "waiting_for_tools",
        "local/echo",
        "2023-11-14",
        "22:13:20Z",
        "sess-1",
    ]
    assert table[2].startswith("r2         completed  ")
    assert table[1].index("local/echo") == table[2].index("local/echo")


def test_format_run_shows_one_field_per_line() -> None:
    text = format_run(record("r1", common_pb2.RUN_STATUS_FAILED))
    assert "status    failed" in text
    assert "model     local/echo" in text
    assert "created   2023-11-14 22:13:20Z" in text
    assert "updated   -" in text


def test_format_output_lists_messages() -> None:
    output = run_pb2.RunOutput(
        run_id="r1",
        session_id="s1",
        iterations=1,
        finish_reason=common_pb2.FINISH_REASON_STOP,
        total_usage=common_pb2.TokenUsage(input_tokens=3, output_tokens=2),
        messages=[
            common_pb2.Message(
                role="assistant",
                content=[common_pb2.ContentPart(text=common_pb2.TextContent(text="hi there"))],
            )
        ],
    )
    text = format_output(output)
    assert "stop, 1 iteration, 3 in + 2 out tokens" in text
    assert text.endswith("[assistant]\nhi there")


def test_spend_shows_codes_budgets_sub_runs_and_cancellers() -> None:
    out, _, printer = render(
        events(
            started(),
            {"sub_run_started": run_pb2.SubRunStartedEvent(child_run_id="child-1")},
            {
                "sub_run_finished": run_pb2.SubRunFinishedEvent(
                    child_run_id="child-1", status=common_pb2.RUN_STATUS_COMPLETED
                )
            },
            {
                "budget_exceeded": run_pb2.BudgetExceededEvent(
                    budget=run_pb2.BUDGET_KIND_TOKENS, limit="1000", used="1200"
                )
            },
            {
                "run_failed": run_pb2.RunFailedEvent(
                    error="budget exceeded", code=run_pb2.FAILURE_CODE_BUDGET_EXCEEDED
                )
            },
        )
    )
    assert "sub-agent run child-1 started" in out
    assert "sub-agent run child-1 completed" in out
    assert "budget exceeded: tokens 1200 of 1000" in out
    assert "✗ failed [budget_exceeded]: budget exceeded" in out
    assert printer.exit_code == EXIT_NOT_COMPLETED
    cancelled, _, _ = render(
        events(
            started(),
            {"run_cancelled": run_pb2.RunCancelledEvent(cancelled_by="alice", reason="enough")},
        )
    )
    assert "✗ cancelled by alice: enough" in cancelled


def test_a_run_record_shows_its_cost_error_and_parent() -> None:
    record = run_pb2.RunRecord(
        id="run-1",
        total_usage=common_pb2.TokenUsage(total_tokens=42),
        total_cost=common_pb2.Cost(amount="0.0042", currency="EUR"),
        error="doom loop detected",
        failure_code=run_pb2.FAILURE_CODE_DOOM_LOOP,
        parent_run_id="run-0",
    )
    shown = format_run(record)
    assert "0.0042 EUR" in shown and "[doom_loop]" in shown and "run-0" in shown
