"""BehestClient's agent calls and `behest agents apply`, against a scripted fake AgentService:
what goes on the wire, what comes back, which calls are retried."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from behest._proto.agent.v1 import agent_pb2, agent_pb2_grpc, common_pb2, run_pb2, run_pb2_grpc
from behest.cli import main
from behest.client import (
    Agent,
    AgentDefinition,
    AgentVersion,
    AlreadyExists,
    BehestClient,
    Budget,
    NotFound,
    RunOptions,
    Unavailable,
    _wire,
)

DEFINITION = AgentDefinition(
    description="Answers", provider="local", model="echo", budget=Budget(max_cost="0.50")
)


class FakeAgents(agent_pb2_grpc.AgentServiceServicer):
    """Agents kept in a dict; the first `unavailable` calls fail with UNAVAILABLE."""

    def __init__(self) -> None:
        self.versions: dict[str, list[agent_pb2.AgentDefinition]] = {}
        self.aliases: dict[str, dict[str, int]] = {}
        self.unavailable = 0
        self.calls: list[tuple[str, Any]] = []

    def _called(self, name: str, request: Any, context: Any) -> None:
        self.calls.append((name, request))
        if self.unavailable:
            self.unavailable -= 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")

    def _agent(self, name: str) -> agent_pb2.Agent:
        return agent_pb2.Agent(
            name=name,
            latest_version=len(self.versions[name]),
            aliases=self.aliases.get(name, {}),
            description=self.versions[name][-1].description,
        )

    def _version(self, name: str, number: int) -> agent_pb2.AgentVersion:
        definition = self.versions[name][number - 1]
        return agent_pb2.AgentVersion(
            name=name, version=number, definition=definition, created_by="alice"
        )

    def CreateAgent(self, request: Any, context: Any) -> agent_pb2.CreateAgentResponse:
        self._called("CreateAgent", request, context)
        if request.name in self.versions:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, f"agent {request.name!r} exists")
        self.versions[request.name] = [request.definition]
        return agent_pb2.CreateAgentResponse(
            agent=self._agent(request.name), version=self._version(request.name, 1)
        )

    def UpdateAgent(self, request: Any, context: Any) -> agent_pb2.UpdateAgentResponse:
        self._called("UpdateAgent", request, context)
        if request.name not in self.versions and not request.allow_missing:
            context.abort(grpc.StatusCode.NOT_FOUND, f"agent {request.name!r} not found")
        versions = self.versions.setdefault(request.name, [])
        changed = not versions or versions[-1] != request.definition
        if changed:
            versions.append(request.definition)
        return agent_pb2.UpdateAgentResponse(
            agent=self._agent(request.name),
            version=self._version(request.name, len(versions)),
            changed=changed,
        )

    def GetAgent(self, request: Any, context: Any) -> agent_pb2.GetAgentResponse:
        self._called("GetAgent", request, context)
        name, _, at = request.agent.partition("@")
        if name not in self.versions:
            context.abort(grpc.StatusCode.NOT_FOUND, f"agent {name!r} not found")
        number = int(at) if at.isdigit() else self.aliases.get(name, {}).get(at, 0)
        number = number or len(self.versions[name])
        return agent_pb2.GetAgentResponse(
            agent=self._agent(name), version=self._version(name, number)
        )

    def ListAgents(self, request: Any, context: Any) -> agent_pb2.ListAgentsResponse:
        self._called("ListAgents", request, context)
        return agent_pb2.ListAgentsResponse(agents=[self._agent(n) for n in sorted(self.versions)])

    def ListAgentVersions(self, request: Any, context: Any) -> Any:
        self._called("ListAgentVersions", request, context)
        numbers = range(len(self.versions[request.name]), 0, -1)
        return agent_pb2.ListAgentVersionsResponse(
            versions=[self._version(request.name, n) for n in numbers]
        )

    def SetAgentAlias(self, request: Any, context: Any) -> agent_pb2.SetAgentAliasResponse:
        self._called("SetAgentAlias", request, context)
        self.aliases.setdefault(request.name, {})[request.alias] = request.version
        return agent_pb2.SetAgentAliasResponse(agent=self._agent(request.name))

    def ArchiveAgent(self, request: Any, context: Any) -> agent_pb2.ArchiveAgentResponse:
        self._called("ArchiveAgent", request, context)
        agent = self._agent(request.name)
        agent.archived = True
        return agent_pb2.ArchiveAgentResponse(agent=agent)


class Runs(run_pb2_grpc.RunServiceServicer):
    def __init__(self) -> None:
        self.requests: list[Any] = []

    def CreateRun(self, request: Any, context: Any) -> run_pb2.CreateRunResponse:
        self.requests.append(request)
        return run_pb2.CreateRunResponse(run_id="run-1", session_id="sess-1")

    def CreateRunStream(self, request: Any, context: Any) -> Iterator[run_pb2.AgentEvent]:
        self.requests.append(request)
        started = run_pb2.RunStartedEvent(session_id="sess-1", agent_name="support")
        started.agent_version = 3
        done = run_pb2.RunCompletedEvent(finish_reason=common_pb2.FINISH_REASON_STOP)
        yield run_pb2.AgentEvent(sequence=1, run_id="run-1", run_started=started)
        yield run_pb2.AgentEvent(sequence=2, run_id="run-1", run_completed=done)

    def ListRuns(self, request: Any, context: Any) -> run_pb2.ListRunsResponse:
        self.requests.append(request)
        record = run_pb2.RunRecord(
            id="run-1", agent_name="support", agent_version=2, current_agent="billing"
        )
        record.current_agent_version = 1
        return run_pb2.ListRunsResponse(runs=[record])


@pytest.fixture
def fake() -> Iterator[tuple[FakeAgents, Runs, str]]:
    agents, runs = FakeAgents(), Runs()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    agent_pb2_grpc.add_AgentServiceServicer_to_server(agents, server)
    run_pb2_grpc.add_RunServiceServicer_to_server(runs, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield agents, runs, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def client(address: str) -> BehestClient:
    return BehestClient(address, reconnect_attempts=3, reconnect_backoff_s=0.001)


async def test_create_sends_the_definition_and_reads_agent_and_version(
    fake: tuple[FakeAgents, Runs, str],
) -> None:
    agents, _, address = fake
    async with client(address) as c:
        made = await c.create_agent("support", DEFINITION)
    assert made.agent == Agent("support", 1, {}, description="Answers")
    assert made.version == AgentVersion("support", 1, DEFINITION, created_by="alice")
    assert made.changed and made.version.definition.raw is not None
    [(_, request)] = agents.calls
    assert request.definition.budget.max_cost == "0.50"
    assert not request.definition.HasField("reasoning")


async def test_create_is_not_retried_and_a_taken_name_is_already_exists(
    fake: tuple[FakeAgents, Runs, str],
) -> None:
    agents, _, address = fake
    agents.unavailable = 1
    async with client(address) as c:
        with pytest.raises(Unavailable):
            await c.create_agent("support", DEFINITION)
        await c.create_agent("support", DEFINITION)
        with pytest.raises(AlreadyExists):
            await c.create_agent("support", DEFINITION)
    assert [name for name, _ in agents.calls] == ["CreateAgent"] * 3


async def test_update_is_retried_and_says_whether_it_changed(
    fake: tuple[FakeAgents, Runs, str],
) -> None:
    agents, _, address = fake
    async with client(address) as c:
        with pytest.raises(NotFound):
            await c.update_agent("support", DEFINITION)
        agents.unavailable = 2
        first = await c.update_agent("support", DEFINITION, allow_missing=True)
        again = await c.update_agent("support", DEFINITION)
        other = await c.update_agent("support", AgentDefinition(model="script"))
    assert (first.changed, first.version.version) == (True, 1)
    assert (again.changed, again.version.version) == (False, 1)
    assert (other.changed, other.version.version) == (True, 2)
    assert [r.allow_missing for n, r in agents.calls] == [False, True, True, True, False, False]


async def test_reads_aliases_and_archive(fake: tuple[FakeAgents, Runs, str]) -> None:
    agents, _, address = fake
    async with client(address) as c:
        await c.create_agent("support", DEFINITION)
        await c.update_agent("support", AgentDefinition(description="v2", model="echo"))
        agents.unavailable = 1
        moved = await c.set_agent_alias("support", "production", 1)
        got = await c.get_agent("support@production")
        versions = await c.agent_versions("support", limit=5)
        listed = await c.list_agents(include_archived=True, limit=10, offset=1)
        archived = await c.archive_agent("support")
    assert moved.aliases == {"production": 1}
    assert (got.version.version, got.version.definition, got.agent.latest_version) == (
        1,
        DEFINITION,
        2,
    )
    assert [v.version for v in versions] == [2, 1]
    assert [a.name for a in listed] == ["support"] and archived.archived
    requests = dict(agents.calls)
    assert requests["ListAgents"].include_archived
    assert (requests["ListAgents"].pagination.limit, requests["ListAgents"].pagination.offset) == (
        10,
        1,
    )
    assert requests["ListAgentVersions"].pagination.limit == 5


def test_a_run_of_an_agent_leaves_provider_and_model_to_it() -> None:
    of_agent = _wire.create_request("hi", RunOptions(agent="support@production"), "r")
    assert (of_agent.agent, of_agent.provider.value, of_agent.model.value) == (
        "support@production",
        "",
        "",
    )
    overridden = _wire.create_request("hi", RunOptions(agent="support", model="script"), "r")
    assert (overridden.provider.value, overridden.model.value) == ("", "script")
    plain = _wire.create_request("hi", RunOptions(), "r")
    assert (plain.agent, plain.provider.value, plain.model.value) == ("", "local", "echo")


async def test_list_runs_by_agent_reads_the_runs_agents(fake: tuple[FakeAgents, Runs, str]) -> None:
    _, runs, address = fake
    async with client(address) as c:
        [run] = await c.list_runs(agent="support", agent_version=2)
    assert (runs.requests[0].agent, runs.requests[0].agent_version) == ("support", 2)
    assert (run.agent_name, run.agent_version) == ("support", 2)
    assert (run.current_agent, run.current_agent_version) == ("billing", 1)


def test_cli_run_with_an_agent_sends_its_reference(
    fake: tuple[FakeAgents, Runs, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, runs, address = fake
    assert main(["run", "hi", "--agent", "support@production", "--server", address]) == 0
    [request] = runs.requests
    assert (request.agent, request.provider.value, request.model.value) == (
        "support@production",
        "",
        "",
    )
    assert "run run-1  session sess-1  agent support@3" in capsys.readouterr().err


def test_cli_lists_the_runs_of_an_agent(
    fake: tuple[FakeAgents, Runs, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, runs, address = fake
    assert main(["runs", "list", "--agent", "support@2", "--server", address]) == 0
    assert (runs.requests[0].agent, runs.requests[0].agent_version) == ("support", 2)
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["RUN", "STATUS", "MODEL", "CREATED", "AGENT", "SESSION"]
    assert "support@2 (now billing@1)" in out
    assert main(["runs", "list", "--agent", "support@prod", "--server", address]) == 2


def test_cli_apply_creates_updates_and_leaves_unchanged(
    fake: tuple[FakeAgents, Runs, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    agents, _, address = fake
    path = tmp_path / "agents.toml"
    path.write_text("[agents.support]\nmodel = 'echo'\n[agents.billing]\nmodel = 'echo'\n")
    assert main(["agents", "apply", str(path), "--server", address]) == 0
    assert main(["agents", "apply", str(path), "--server", address]) == 0
    path.write_text("[agents.support]\nmodel = 'script'\n")
    assert main(["agents", "apply", str(path), "--server", address]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "created support (version 1)",
        "created billing (version 1)",
        "support: unchanged (version 1)",
        "billing: unchanged (version 1)",
        "support: version 2",
    ]
    assert {r.allow_missing for _, r in agents.calls} == {True}


def test_cli_apply_of_a_bad_file_sends_nothing(
    fake: tuple[FakeAgents, Runs, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    agents, _, address = fake
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text("[agents.support]\nmodel = 'echo'\n")
    bad.write_text("[agents.billing]\nmodle = 'echo'\n")
    assert main(["agents", "apply", str(good), str(bad), "--server", address]) == 2
    assert capsys.readouterr().err == f"error: {bad}: agents.billing: unknown field 'modle'\n"
    assert agents.calls == []


def test_the_wire_message_of_a_definition_is_checked() -> None:
    with pytest.raises(ValueError, match="definition: "):
        _wire.definition_message(AgentDefinition(max_iterations=2**40))


def test_cli_apply_makes_a_circle_of_new_agents_in_two_steps(
    fake: tuple[FakeAgents, Runs, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    agents, _, address = fake
    path = tmp_path / "agents.toml"
    path.write_text(
        "[agents.triage]\nhandoffs = ['billing']\n[agents.billing]\nhandoffs = ['triage']\n"
    )
    assert main(["agents", "apply", str(path), "--server", address]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "created billing (version 1)",
        "created triage (version 1)",
        "billing: version 2",
    ]
    updates = [(r.name, list(r.definition.handoffs)) for n, r in agents.calls if n == "UpdateAgent"]
    assert updates == [("billing", []), ("triage", ["billing"]), ("billing", ["triage"])]
    assert main(["agents", "apply", str(path), "--server", address]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "billing: unchanged (version 2)",
        "triage: unchanged (version 1)",
    ]
