"""Prompt caching (issue 17, item 4) through a real server and the Anthropic wire-format fake:
cache_control breakpoints on the run's tools, instructions and transcript (settings), cache
reads and writes reported apart in usage and priced apart; OpenAI caches by itself (its
cached tokens: tests/e2e/test_provider_openai.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from behest.app import App
from behest.config import Settings
from tests.fakes.anthropic_fake import FakeAnthropic, text_reply, tool_reply
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    start_server,
    stop_server,
)

PROVIDER = "claude"
MODEL = "claude-test"
EPHEMERAL = {"type": "ephemeral"}
# Per million tokens: cache reads at a tenth of input, cache writes at 1.25 times.
PRICES = {
    "input_price": "3",
    "output_price": "15",
    "cached_input_price": "0.30",
    "cache_write_price": "3.75",
}

Start = Callable[..., Awaitable[Server]]


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as running:
        yield running


@pytest.fixture
async def start(
    tmp_path: Path, fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Start]:
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", "sk-ant-test")
    running: list[Server] = []

    async def start_one(**provider: Any) -> Server:
        table = {
            "type": "anthropic",
            "base_url": fake.url,
            "api_key_env": "FAKE_ANTHROPIC_KEY",
            "models": {MODEL: {"max_output_tokens": 256, **PRICES}},
            **provider,
        }
        settings: Settings = fast_settings(tmp_path / str(len(running))).with_tables(
            {"providers": {PROVIDER: table}}, source="test"
        )
        running.append(await start_server(settings))
        return running[-1]

    try:
        yield start_one
    finally:
        for server in running:
            await stop_server(server)


def request(text: str, **fields: Any) -> pb.CreateRunRequest:
    return create_request(text, provider=PROVIDER, model=MODEL, **fields)


def marked(body: dict[str, Any]) -> list[str]:
    """Where the request's cache_control breakpoints are: tools[i], system[i], messages[i][j]."""
    found = [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list):
        found += [f"system[{i}]" for i, b in enumerate(system) if "cache_control" in b]
    for i, message in enumerate(body["messages"]):
        found += [
            f"messages[{i}][{j}]" for j, b in enumerate(message["content"]) if "cache_control" in b
        ]
    return found


async def test_breakpoints_mark_the_tools_the_instructions_and_the_transcript_so_far(
    start: Start, fake: FakeAnthropic
) -> None:
    server = await start()
    fake.push(
        tool_reply(("toolu_1", "calculator", ['{"expression": "2+2"}']), cache_write=1800),
        text_reply("Four.", input_tokens=20, output_tokens=3, cache_read=1800, cache_write=60),
    )
    events = await collect(
        server.runs.CreateRunStream(
            request("What is 2+2?", instructions="Be exact.", tools=["calculator", "current_time"])
        )
    )
    assert kind(events[-1]) == "run_completed"
    first, second = fake.bodies
    assert first["system"] == [{"type": "text", "text": "Be exact.", "cache_control": EPHEMERAL}]
    assert [t["name"] for t in first["tools"]] == ["calculator", "current_time"]
    assert marked(first) == ["tools[1]", "system[0]", "messages[0][0]"]
    # The next call moves the transcript's breakpoint to its end: the tool's result.
    assert marked(second) == ["tools[1]", "system[0]", "messages[2][0]"]
    assert second["messages"][2]["content"][0]["type"] == "tool_result"
    # Cache writes and reads are reported apart from input tokens, and priced apart.
    usages = [e.usage_recorded for e in events if kind(e) == "usage_recorded"]
    assert [(u.usage.cached_input_tokens, u.usage.cache_write_tokens) for u in usages] == [
        (0, 1800),
        (1800, 60),
    ]
    cost = (
        Decimal(40 + 20) * 3
        + Decimal(30 + 3) * 15
        + Decimal(1800) * Decimal("0.30")
        + Decimal(1800 + 60) * Decimal("3.75")
    ) / 1_000_000
    output = await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=events[0].run_id))
    assert Decimal(output.output.total_cost.amount) == cost
    assert output.output.total_usage.cached_input_tokens == 1800
    assert output.output.total_usage.cache_write_tokens == 1860


async def test_breakpoints_follow_the_settings(start: Start, fake: FakeAnthropic) -> None:
    only_tools = await start(cache_breakpoints=["tools"])
    fake.push(text_reply("ok"))
    await collect(
        only_tools.runs.CreateRunStream(
            request("hi", instructions="Be brief.", tools=["current_time"])
        )
    )
    body = fake.bodies[-1]
    assert marked(body) == ["tools[0]"]
    assert body["system"] == "Be brief."
    off = await start(cache_breakpoints=[])
    fake.push(text_reply("ok"))
    await collect(off.runs.CreateRunStream(request("hi", instructions="Be brief.")))
    assert "cache_control" not in json.dumps(fake.bodies[-1])


def test_cache_breakpoints_are_checked_at_start(tmp_path: Path) -> None:
    def settings(table: dict[str, Any]) -> Settings:
        return fast_settings(tmp_path).with_tables({"providers": {"p": table}}, source="test")

    bad_list = r"'providers\.p\.cache_breakpoints': must be a list of tools"
    with pytest.raises(ValueError, match=bad_list):
        App(settings({"type": "anthropic", "api_key_env": "HOME", "cache_breakpoints": ["all"]}))
    with pytest.raises(ValueError, match=r"only an anthropic provider takes them"):
        App(settings({"type": "local", "cache_breakpoints": ["tools"]}))
