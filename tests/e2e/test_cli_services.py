"""The `behest` commands over sessions, a run's stored events, pruning, tools and providers,
run as child processes (`python -m behest`) against a real server."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from google.protobuf.json_format import MessageToDict

from behest._proto.agent.v1 import run_pb2 as pb
from tests.support import (
    Server,
    behest,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server,
    stop_server,
)


async def echo_run(server: Server, text: str, session_id: str = "") -> list[pb.AgentEvent]:
    events = await collect(server.runs.CreateRunStream(create_request(text, session_id=session_id)))
    assert kind(events[-1]) == "run_completed"
    return events


async def test_sessions_list_get_messages_and_delete(server: Server) -> None:
    first = await echo_run(server, "first words")
    session_id = first[0].run_started.session_id
    await echo_run(server, "second words", session_id)
    address = ("--server", server.address)

    listed = await behest("sessions", "list", *address)
    assert listed.code == 0, listed.err
    header, row = listed.out.splitlines()
    assert header.split()[:3] == ["SESSION", "RUNS", "MESSAGES"]
    assert row.split()[:3] == [session_id, "2", "4"]

    got = await behest("sessions", "get", session_id, *address)
    assert got.code == 0, got.err
    assert f"session    {session_id}" in got.out and "active run -" in got.out

    text = await behest("sessions", "messages", session_id, *address)
    assert text.code == 0, text.err
    assert text.out.split("\n\n") == [
        "[user]\nfirst words",
        "[assistant]\nfirst words",
        "[user]\nsecond words",
        "[assistant]\nsecond words\n",
    ]
    lines = await behest("sessions", "messages", session_id, "--from", "2", "--json", *address)
    assert lines.code == 0, lines.err
    messages = [json.loads(line) for line in lines.out.splitlines()]
    assert [(m["role"], m["content"][0]["text"]["text"]) for m in messages] == [
        ("user", "second words"),
        ("assistant", "second words"),
    ]
    assert {m["session_id"] for m in messages} == {session_id}

    deleted = await behest("sessions", "delete", session_id, *address)
    assert deleted.code == 0, deleted.err
    assert deleted.out == f"deleted session {session_id} and its 2 runs\n"
    gone = await behest("sessions", "get", session_id, *address)
    assert gone.code == 2
    assert gone.err == f"error: NOT_FOUND: session {session_id} not found\n"
    empty = await behest("sessions", "list", *address)
    assert (empty.code, empty.out) == (0, "no sessions\n")


async def test_runs_events_prints_every_stored_event(server: Server) -> None:
    steps = script({"text": " ".join(f"w{i}" for i in range(30)), "deltas": 30})
    events = await collect(server.runs.CreateRunStream(create_request(steps, model="script")))
    run_id = events[0].run_id

    as_json = await behest("runs", "events", run_id, "--json", "--server", server.address)
    assert as_json.code == 0, as_json.err
    printed = [json.loads(line) for line in as_json.out.splitlines()]
    assert printed == [MessageToDict(e, preserving_proto_field_name=True) for e in events]

    after = await behest("runs", "events", run_id, "--after", "2", "--server", server.address)
    assert after.code == 0, after.err
    lines = after.out.splitlines()
    assert len(lines) == len(events) - 2
    assert lines[0].split()[0] == "3"
    assert lines[-1].split()[0] == str(len(events))
    assert "run_completed" in lines[-1] and '"finish_reason":"FINISH_REASON_STOP"' in lines[-1]

    unknown = await behest("runs", "events", str(uuid.uuid4()), "--server", server.address)
    assert unknown.code == 2 and unknown.err.startswith("error: NOT_FOUND: run ")


async def test_tools_and_providers_list(server: Server) -> None:
    tools = await behest("tools", "list", "--server", server.address)
    assert tools.code == 0, tools.err
    rows = {line.split()[0]: line.split() for line in tools.out.splitlines()[1:]}
    assert set(rows) == {*server.app.tools.names(), "spawn_agent"}
    assert rows["calculator"][1:4] == ["builtin", "read_only,concurrency_safe,idempotent", "30"]
    assert rows["spawn_agent"][1:3] == ["builtin", "concurrency_safe,idempotent"]

    providers = await behest("providers", "list", "--server", server.address)
    assert providers.code == 0, providers.err
    lines = providers.out.splitlines()
    assert lines[0].split()[:3] == ["PROVIDER", "TYPE", "MODEL"]
    assert [line.split()[:4] for line in lines[1:]] == [
        ["local", "local", "echo", "128000"],
        ["local", "local", "script", "128000"],
    ]


async def test_runs_prune_works_on_the_database_without_a_server(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = await start_server(fast_settings(data_dir))
    try:
        for text in ("old one", "old two"):
            await echo_run(server, text)
    finally:
        await stop_server(server)
    where = ("--data-dir", str(data_dir))

    counted = await behest("runs", "prune", "--older-than", "0", "--dry-run", *where)
    assert counted.code == 0, counted.err
    assert counted.out == "2 runs would be pruned (dry run: nothing was deleted)\n"
    kept = await behest("runs", "prune", "--older-than", "1", *where)
    assert (kept.code, kept.out) == (0, "pruned 0 runs\n")
    pruned = await behest("runs", "prune", "--older-than", "0", *where)
    assert (pruned.code, pruned.out) == (0, "pruned 2 runs\n")
    again = await behest("runs", "prune", "--older-than", "0", "--dry-run", *where)
    assert again.out == "0 runs would be pruned (dry run: nothing was deleted)\n"

    server = await start_server(fast_settings(data_dir))
    try:
        listed = await server.runs.ListRuns(pb.ListRunsRequest())
    finally:
        await stop_server(server)
    assert list(listed.runs) == []

    negative = await behest("runs", "prune", "--older-than", "-1", *where)
    assert negative.code == 2
    assert negative.err.startswith("error: --older-than must be a number of days")


async def test_usage_shows_todays_tokens(server: Server) -> None:
    events = await echo_run(server, "count these words")
    session_id = events[0].run_started.session_id
    shown = await behest("usage", "--server", server.address, "--session", session_id)
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert lines[0].split() == ["DAY", "RUNS", "TOKENS", "INPUT", "CACHED", "OUTPUT", "COST"]
    day = lines[1].split()
    assert day[1] == "1" and int(day[2]) > 0 and day[-1] == "-"  # echo has no prices
    assert lines[-1].split()[0] == "total"
    yesterday = (datetime.now(UTC).date() - timedelta(days=1)).isoformat()
    as_json = await behest("usage", "--server", server.address, "--json", "--from", yesterday)
    assert as_json.code == 0, as_json.err
    assert int(json.loads(as_json.out)["total_usage"]["total_tokens"]) > 0
    bad = await behest("usage", "--server", server.address, "--from", "someday")
    assert bad.code != 0 and "from_day" in bad.err
