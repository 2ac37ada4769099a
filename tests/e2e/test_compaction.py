"""Compaction of long sessions, prune, the circuit breaker, context overflow (issue 5)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from behest.config import Settings
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server_with_plugins,
    stop_server,
)

WINDOW = 400  # tokens; buffer 100 → compaction from 300 estimated tokens
LONG = "word " * 80  # 400 characters: about 104 estimated tokens as a message


def small_window(tmp_path: Path, window: int = WINDOW) -> Settings:
    models = {
        name: {"context_window": window, "max_output_tokens": 50} for name in ("echo", "script")
    }
    return fast_settings(tmp_path).with_tables(
        {"providers": {"local": {"type": "local", "models": models}}}, source="test"
    )


def config(**fields: object) -> pb.UpdateCompactionConfigRequest:
    values: dict[str, object] = {
        "auto": True,
        "prune": False,
        "buffer_tokens": 100,
        "keep_tokens": 200,
        "tail_turns": 1,
        "circuit_breaker_threshold": 3,
    }
    values.update(fields)
    return pb.UpdateCompactionConfigRequest(**values)  # type: ignore[arg-type]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    running = await start_server_with_plugins(small_window(tmp_path))
    try:
        yield running
    finally:
        await stop_server(running)


async def run(
    server: Server, text: str, session_id: str = "", model: str = "echo"
) -> list[pb.AgentEvent]:
    request = create_request(text, model=model, session_id=session_id)
    return await collect(server.runs.CreateRunStream(request))


def said(events: list[pb.AgentEvent]) -> str:
    last = max(i for i, e in enumerate(events) if kind(e) == "model_started")
    return "".join(e.text_delta.delta for e in events[last:] if kind(e) == "text_delta")


async def test_compaction_fires_at_the_threshold_and_keeps_the_last_turn(server: Server) -> None:
    await server.compaction.UpdateCompactionConfig(config())
    first = await run(server, LONG)
    session = first[0].run_started.session_id
    assert "compaction_started" not in [kind(e) for e in first]  # 104 tokens: far below

    second = await run(server, LONG, session)  # user + assistant + user ≈ 312 tokens
    kinds = [kind(e) for e in second]
    assert kinds[:6] == [
        "run_started",
        "compaction_started",
        "compaction_finished",
        "usage_recorded",  # the summary call's: it counts like the run's own calls
        "context_built",
        "model_started",
    ]
    summary_usage = second[3].usage_recorded.usage
    assert summary_usage.input_tokens > 0 and summary_usage.output_tokens > 0
    started, finished = second[1].compaction_started, second[2].compaction_finished
    assert (started.messages_before, started.reason) == (3, "threshold")
    assert started.estimated_tokens_before >= 300
    assert finished.succeeded and not finished.pruned_only
    assert finished.messages_after == 2  # the summary and the last turn's user message
    assert finished.estimated_tokens_after < started.estimated_tokens_before
    assert second[4].context_built.message_count == 2
    assert kind(second[-1]) == "run_completed"
    output = await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=second[0].run_id))
    own = [e.usage_recorded.usage.total_tokens for e in second if kind(e) == "usage_recorded"]
    assert output.output.total_usage.total_tokens == sum(own)


async def test_the_next_run_uses_the_summary_and_the_tail(server: Server) -> None:
    await server.compaction.UpdateCompactionConfig(config())
    first = await run(server, LONG)
    session = first[0].run_started.session_id
    await run(server, LONG, session)
    history = await run(server, script({"say": "history"}), session, model="script")
    assert said(history) == "system user assistant user"
    summary = await run(server, script({"say": "summary"}), session, model="script")
    assert said(summary).startswith(
        "Summary of the conversation so far:\n[2 earlier lines] user: word"
    )


async def test_prune_clears_old_tool_results_without_a_summary(server: Server) -> None:
    # The compaction model refuses to summarise: only a prune can succeed here.
    await server.compaction.UpdateCompactionConfig(
        config(prune=True, provider="local", model="script")
    )
    big = {"tool_calls": [{"name": "big_output", "arguments": {"size": 800}}]}
    first = await run(server, script(big), model="script")
    session = first[0].run_started.session_id
    second = await run(server, script(big), session, model="script")
    finished = [e.compaction_finished for e in second if kind(e) == "compaction_finished"]
    assert len(finished) == 1
    assert finished[0].succeeded and finished[0].pruned_only
    history = await run(server, script({"say": "history"}), session, model="script")
    assert "system" not in said(history)


async def test_the_breaker_opens_after_the_threshold_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    server = await start_server_with_plugins(small_window(tmp_path))
    try:
        await server.compaction.UpdateCompactionConfig(
            config(provider="local", model="script", circuit_breaker_threshold=2)
        )
        first = await run(server, LONG)
        session = first[0].run_started.session_id
        second = await run(server, LONG, session)
        third = await run(server, LONG, session)
        fourth = await run(server, LONG, session)
        for events in (second, third):
            finished = next(
                e.compaction_finished for e in events if kind(e) == "compaction_finished"
            )
            assert not finished.succeeded and "summary call failed" in finished.error
            assert kind(events[-1]) == "run_completed"  # a failed compaction does not fail the run
        assert "compaction_circuit_opened" not in [kind(e) for e in second]
        opened = [e for e in third if kind(e) == "compaction_circuit_opened"]
        assert [e.compaction_circuit_opened.consecutive_failures for e in opened] == [2]
        assert "compaction_started" not in [kind(e) for e in fourth]  # skipped while open
    finally:
        await stop_server(server)
    restarted = await start_server_with_plugins(small_window(tmp_path))
    try:
        breaker = await restarted.compaction.GetCircuitBreaker(pb.GetCircuitBreakerRequest())
        assert (breaker.is_open, breaker.consecutive_failures) == (True, 2)
        await restarted.compaction.UpdateCompactionConfig(config())
        breaker = await restarted.compaction.GetCircuitBreaker(pb.GetCircuitBreakerRequest())
        assert (breaker.is_open, breaker.consecutive_failures) == (False, 0)
    finally:
        await stop_server(restarted)


async def test_a_context_overflow_compacts_and_retries_once(server: Server) -> None:
    await server.compaction.UpdateCompactionConfig(
        config(buffer_tokens=10, provider="local", model="echo")
    )
    first = await run(server, LONG)
    session = first[0].run_started.session_id
    steps = script({"error": "context_overflow"}, {"text": "fits now"})
    events = await run(server, steps, session, model="script")
    kinds = [kind(e) for e in events]
    started = next(e.compaction_started for e in events if kind(e) == "compaction_started")
    assert started.reason == "overflow"
    assert [e.model_started.iteration for e in events if kind(e) == "model_started"] == [1, 1]
    assert kinds.index("compaction_finished") < len(kinds) - 1
    assert said(events) == "fits now"
    assert kind(events[-1]) == "run_completed"


async def test_a_context_overflow_that_compaction_cannot_fix_fails_the_run(server: Server) -> None:
    await server.compaction.UpdateCompactionConfig(config())
    events = await run(
        server, script({"error": "context_overflow"}, {"text": "never"}), model="script"
    )
    assert kind(events[-1]) == "run_failed"
    assert "compacting the context failed" in events[-1].run_failed.error


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"tail_turns": 0}, "tail_turns"),
        ({"keep_tokens": 0}, "keep_tokens"),
        ({"circuit_breaker_threshold": 0}, "circuit_breaker_threshold"),
        ({"provider": "local"}, "provider and model"),
        ({"provider": "nope", "model": "echo"}, "provider"),
        ({"provider": "local", "model": "gpt-9"}, "model"),
    ],
)
async def test_inconsistent_compaction_config_is_invalid(
    server: Server, fields: dict[str, object], field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.compaction.UpdateCompactionConfig(config(**fields))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (err.value.details() or "")
