"""A tool's context: who takes it and how, the deadline, the idempotency key, MCP's `_meta`."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from behest.domain.messages import ToolCall
from behest.domain.runs import Run, RunStatus
from behest.runs.executions import RunExecutions
from behest.runs.tool_calls import tool_context
from behest.tools import context as context_module
from behest.tools import registry as registry_module
from behest.tools.base import FunctionTool, ToolResult
from behest.tools.context import (
    Passing,
    ToolContext,
    current_tool_context,
    idempotency_key,
    passing,
)
from behest.tools.mcp_tools import request_meta
from behest.tools.registry import ToolRegistry

CONTEXT = ToolContext(
    execution_id="e1",
    attempt=1,
    idempotency_key=idempotency_key("acme", "run-1", "call-1"),
    run_id="run-1",
    session_id="session-1",
    tenant="acme",
    principal="alice",
    call_id="call-1",
    tool_name="probe",
)


class OldStyle:
    """A plugin tool written before contexts: `__call__(self, arguments)`."""

    name = "old"
    description = "An old tool."
    parameters_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    timeout_s = 2.0
    read_only = concurrency_safe = idempotent = True

    async def __call__(self, arguments: dict[str, Any]) -> str:
        seen = current_tool_context()
        return f"old: {seen.call_id if seen else 'no context'}"


class Positional(OldStyle):
    """A tool taking the context as its second parameter."""

    name = "positional"
    seen: list[tuple[ToolContext | None, ToolContext | None]]

    def __init__(self) -> None:
        self.seen = []

    async def __call__(self, arguments: dict[str, Any], ctx: ToolContext | None) -> str:  # type: ignore[override]
        self.seen.append((ctx, current_tool_context()))
        return "ok"


def execute(registry: ToolRegistry, name: str, context: ToolContext | None) -> ToolResult:
    return asyncio.run(registry.execute(ToolCall("call-1", name, "{}"), context))


def test_an_old_style_tool_runs_with_or_without_a_context() -> None:
    registry = ToolRegistry([OldStyle()])
    assert execute(registry, "old", CONTEXT) == ToolResult("old: call-1")
    assert execute(registry, "old", None) == ToolResult("old: no context")


def test_a_tool_that_takes_a_context_gets_it_with_its_deadline() -> None:
    tool = Positional()
    registry = ToolRegistry([tool])
    began = datetime.now(UTC)
    assert execute(registry, "positional", CONTEXT) == ToolResult("ok")
    ended = datetime.now(UTC)
    given, current = tool.seen[0]
    assert given is not None and given == current
    assert given.deadline is not None
    assert began + timedelta(seconds=2) <= given.deadline <= ended + timedelta(seconds=2)
    assert given == ToolContext(**{**_fields(CONTEXT), "deadline": given.deadline})
    assert current_tool_context() is None  # only while the tool runs


def test_without_a_context_a_tool_that_asks_for_one_gets_none() -> None:
    tool = Positional()
    assert execute(ToolRegistry([tool]), "positional", None) == ToolResult("ok")
    assert tool.seen == [(None, None)]


def test_a_function_tool_gets_the_context_by_keyword_or_position() -> None:
    got: list[ToolContext | None] = []

    async def keyword(arguments: dict[str, Any], *, context: ToolContext | None = None) -> str:
        got.append(context)
        return "keyword"

    async def positional(arguments: dict[str, Any], context: ToolContext | None) -> str:
        got.append(context)
        return "positional"

    async def plain(arguments: dict[str, Any]) -> str:
        return "plain"

    registry = ToolRegistry(
        [
            FunctionTool(name="kw", description="k", function=keyword),
            FunctionTool(name="pos", description="p", function=positional),
            FunctionTool(name="plain", description="-", function=plain),
        ]
    )
    assert execute(registry, "kw", CONTEXT).text == "keyword"
    assert execute(registry, "pos", CONTEXT).text == "positional"
    assert execute(registry, "plain", CONTEXT).text == "plain"
    assert [c.call_id if c else None for c in got] == ["call-1", "call-1"]


def test_how_a_tool_takes_its_context_is_looked_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    looked: list[object] = []
    real = registry_module.passing

    def counted(function: Any) -> Passing:
        looked.append(function)
        return real(function)

    monkeypatch.setattr(registry_module, "passing", counted)
    registry = ToolRegistry([Positional()])
    for _ in range(3):
        execute(registry, "positional", CONTEXT)
    assert len(looked) == 1


def _keyword_only(arguments: dict[str, Any], *, context: object) -> None: ...
def _second(arguments: dict[str, Any], ctx: object) -> None: ...
def _optional(arguments: dict[str, Any], limit: int = 5) -> None: ...
def _wrapper(*args: Any, **kwargs: Any) -> None: ...
def _plain(arguments: dict[str, Any]) -> None: ...
def _named_default(arguments: dict[str, Any], context: object = None) -> None: ...


@pytest.mark.parametrize(
    ("function", "how"),
    [
        (_keyword_only, Passing.KEYWORD),
        (_named_default, Passing.KEYWORD),
        (_second, Passing.POSITIONAL),
        (_optional, Passing.NONE),  # an old tool's optional parameter is left alone
        (_wrapper, Passing.NONE),
        (_plain, Passing.NONE),
        (len, Passing.NONE),
    ],
)
def test_which_signatures_ask_for_the_context(function: Any, how: Passing) -> None:
    assert passing(function) is how


def test_the_idempotency_key_is_stable_and_differs_for_every_other_call() -> None:
    key = idempotency_key("acme", "run-1", "call-1")
    assert key == idempotency_key("acme", "run-1", "call-1")
    assert re.fullmatch(r"[0-9a-f]{32}", key)
    others = [
        idempotency_key("other", "run-1", "call-1"),
        idempotency_key("acme", "run-2", "call-1"),
        idempotency_key("acme", "run-1", "call-2"),
        idempotency_key("acm", "erun-1", "call-1"),  # the same bytes, split differently
        idempotency_key("acme", "run-1call-1", ""),
    ]
    assert len({key, *others}) == 6
    assert "acme" not in key


def test_each_execution_of_a_call_has_its_own_id_and_the_calls_key() -> None:
    now = datetime.now(UTC)
    run = Run(
        id="run-1",
        session_id="session-1",
        status=RunStatus.WAITING_FOR_TOOLS,
        provider="local",
        model="script",
        input="",
        metadata="",
        tool_choice="auto",
        created_at=now,
        updated_at=now,
        tenant="acme",
    )
    call = ToolCall("call-1", "probe", "{}")
    records = RunExecutions(run=run, store=None, tools=ToolRegistry(), node="a")  # type: ignore[arg-type]
    once, _ = records.begin(call)
    again, _ = records.begin(call)  # the call run again (after a stop cut it)
    first, second = tool_context(run, once), tool_context(run, again)
    assert (first.attempt, second.attempt) == (1, 2)
    assert first.execution_id == once.id != second.execution_id == again.id
    assert first.idempotency_key == second.idempotency_key == CONTEXT.idempotency_key
    assert first == ToolContext(
        **{**_fields(CONTEXT), "execution_id": first.execution_id, "principal": ""}
    )


# The MCP spec's `_meta` key format: an optional prefix of dot-separated labels and a
# slash, then a name; a prefix whose second label is "modelcontextprotocol" or "mcp" is MCP's.
_LABEL = r"[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_META_KEY = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*/)?(?:[A-Za-z0-9](?:[\w.-]*[A-Za-z0-9])?)?")


def test_the_mcp_meta_of_a_call_has_spec_conforming_keys() -> None:
    deadline = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    meta = request_meta(ToolContext(**{**_fields(CONTEXT), "deadline": deadline}))
    assert meta == {
        "io.behest/execution_id": "e1",
        "io.behest/attempt": 1,
        "io.behest/idempotency_key": CONTEXT.idempotency_key,
        "io.behest/run_id": "run-1",
        "io.behest/deadline": "2030-01-02T03:04:05.678Z",
    }
    for key in meta:
        assert _META_KEY.fullmatch(key)
        assert key.split("/")[0].split(".")[1:2] not in (["mcp"], ["modelcontextprotocol"])
    assert request_meta(None) is None
    assert "io.behest/deadline" not in (request_meta(CONTEXT) or {})


def _fields(context: ToolContext) -> dict[str, Any]:
    return {name: getattr(context, name) for name in context_module.ToolContext.__slots__}
