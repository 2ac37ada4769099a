"""An MCP tool that requires task-augmented execution is listed with why behest does not offer
it, never offered to a model, and a call of it anyway is an error result that says why (the
real server's tool: tests/e2e/test_mcp_everything.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mcp.types import Tool as McpTool
from mcp.types import ToolExecution

from behest.domain.messages import ToolCall
from behest.domain.runs import Run, RunStatus, ToolChoice
from behest.runs import catalog
from behest.runs.tool_calls import offered
from behest.tools.base import ToolResult
from behest.tools.context import ToolContext
from behest.tools.mcp_config import McpServerConfig
from behest.tools.mcp_tools import make_tools
from behest.tools.registry import MCP, ToolRegistry

SCHEMA = {"type": "object", "properties": {"topic": {"type": "string"}}}
WHY = (
    'it requires task-augmented execution (execution.taskSupport "required"), which behest '
    "does not run"
)


def listed(support: str | None) -> McpTool:
    execution = None if support is None else ToolExecution(task_support=support)  # type: ignore[arg-type]
    return McpTool(name=f"research-{support}", input_schema=SCHEMA, execution=execution)


async def called(tool: str, arguments: dict[str, Any], context: ToolContext | None) -> ToolResult:
    return ToolResult(f"called {tool}")


def registry() -> ToolRegistry:
    config = McpServerConfig(name="everything", command="node")
    tools = ToolRegistry()
    for support in ("required", "optional", "forbidden", None):
        (tool,) = make_tools(config, [listed(support)], called)
        tools.add(tool, source=MCP)
    return tools


def run(**fields: Any) -> Run:
    now = datetime.now(UTC)
    return Run(
        id="r-1",
        session_id="s-1",
        status=RunStatus.PENDING,
        provider="local",
        model="script",
        input="",
        metadata="",
        tool_choice=ToolChoice.AUTO,
        created_at=now,
        updated_at=now,
        **fields,
    )


def test_a_task_required_tool_is_listed_with_why_it_is_not_offered() -> None:
    shown = {t.name: t.unsupported for t in catalog.tools(registry())}
    assert shown["everything__research-required"] == WHY
    others = ("optional", "forbidden", "None")
    assert all(shown[f"everything__research-{s}"] == "" for s in others)


def test_it_is_never_offered_even_when_a_run_names_it() -> None:
    tools = registry()
    assert "everything__research-required" not in offered(run(), tools, sub_agents=False)
    assert "everything__research-optional" in offered(run(), tools, sub_agents=False)
    named = run(tools=("everything__research-required", "everything__research-forbidden"))
    assert offered(named, tools, sub_agents=False) == {"everything__research-forbidden"}


async def test_a_call_of_it_anyway_says_why_it_was_not_made() -> None:
    call = ToolCall("call-1", "everything__research-required", '{"topic": "tasks"}')
    result = await registry().execute(call)
    assert result == ToolResult(f"MCP tool 'research-required' was not called: {WHY}", True)
    optional = ToolCall("call-2", "everything__research-optional", "{}")
    assert (await registry().execute(optional)).text == "called research-optional"
