"""What a server offers runs: its tools and its providers' models (never an API key)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from behest.domain.spend import Prices


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolInfo:
    """A tool runs may use, with what the loop may do with it."""

    name: str
    description: str
    parameters_schema: dict[str, Any]
    # "builtin", "plugin", "mcp" or "worker".
    source: str
    read_only: bool
    concurrency_safe: bool
    idempotent: bool
    requires_approval: bool
    # 0: no timeout of its own.
    timeout_s: float
    # A worker tool: how many live workers serve it.
    workers: int = 0
    # Why behest does not offer it to models ("" when it does): an MCP tool that requires
    # task-augmented execution, say.
    unsupported: str = ""
    # Why the tool is unavailable now ("" when it is available): an MCP server that is down.
    unavailable_reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelInfo:
    """A model a provider offers: its limits and prices (None: no prices set)."""

    name: str
    context_window: int
    max_output_tokens: int
    prices: Prices | None = None
    # Media types it takes beside text (content parts); () text only.
    input_media: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderInfo:
    """A configured provider; deliberately without its API key."""

    name: str
    type: str
    base_url: str
    default_model: str
    models: tuple[ModelInfo, ...] = field(default_factory=tuple)
