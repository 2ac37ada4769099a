"""A run's options, one typed object shared by create_run and stream_run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from behest.client._enums import BusyPolicy
from behest.client._types import Budget, ContentPart, Reasoning, ResponseFormat
from behest.client._waits import ClientTool

# How a client tool may be given: a ClientTool, or (description, JSON Schema of its arguments).
ClientToolSpec = ClientTool | tuple[str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """What a run is made with beside its input text; every field has the server's default.

    Waiting: `client_tools` (name → ClientTool or (description, schema)) are run by the
    caller; calls of `approval_required_tools`, and with `approve_side_effects` of every tool
    not marked read-only, wait for an approval; the timeouts are seconds (0: the server's).

    `agent` runs a stored agent ("NAME", "NAME@VERSION" or "NAME@ALIAS"): its definition
    gives every field left empty here (provider and model included); without an agent an
    empty provider and model mean local's `echo`.
    """

    session_id: str = ""
    # With session_id, when its run is still active: reject (default), interrupt, rollback.
    on_busy: BusyPolicy = BusyPolicy.UNSPECIFIED
    agent: str = ""
    provider: str = ""
    model: str = ""
    metadata: str = ""  # a JSON object stored with the run
    tool_choice: str = ""  # auto, none or required
    instructions: str = ""
    tools: Sequence[str] = ()
    max_iterations: int = 0
    budget: Budget | None = None
    allow_sub_agents: bool = False
    client_tools: Mapping[str, ClientToolSpec] = field(default_factory=dict)
    approval_required_tools: Sequence[str] = ()
    approve_side_effects: bool = False
    approval_timeout_s: int = 0
    client_tool_timeout_s: int = 0
    # Images and files after the input text (see `attachment`).
    content: Sequence[ContentPart] = ()
    # The final answer must be JSON that validates against this (structured output).
    response_format: ResponseFormat | None = None
    reasoning: Reasoning | None = None
