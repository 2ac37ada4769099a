"""What this server offers runs, as ListTools and ListProviders show it.

Tools: every tool of the registry, with the flags the loop acts on, plus the built-in
`spawn_agent` (runs/sub_runs.py), which the loop offers itself to runs that allow sub-agents;
and the tools known but unavailable now (an MCP server that is down), with why.
Providers: every configured one, with the models it knows of; never an API key.
"""

from __future__ import annotations

from behest.domain.catalog import ModelInfo, ProviderInfo, ToolInfo
from behest.providers.config import ModelInfo as ConfiguredModel
from behest.providers.config import ProviderConfig
from behest.providers.local import KNOWN_MODELS as LOCAL_MODELS
from behest.providers.registry import ProviderRegistry
from behest.runs import sub_runs
from behest.tools.base import Tool
from behest.tools.registry import BUILTIN, WORKER, ToolRegistry

SPAWN_NOTE = " Offered only to runs created with allow_sub_agents (and below the depth limit)."


def tools(registry: ToolRegistry) -> list[ToolInfo]:
    """Every tool runs may use, by name, and those unavailable now with why; a tool needs
    an approval when its own definition or the settings' approval_required_tools say so."""
    listed = []
    for name in registry.names():
        tool = registry.get(name)
        assert tool is not None
        listed.append(_info(registry, tool))
    for tool, why in registry.unavailable().values():
        listed.append(_info(registry, tool, why))
    if registry.get(sub_runs.SPAWN_TOOL) is None:
        listed.append(spawn_agent())
    return sorted(listed, key=lambda t: t.name)


def _info(registry: ToolRegistry, tool: Tool, unavailable: str = "") -> ToolInfo:
    name = tool.name
    return ToolInfo(
        name=name,
        description=tool.description,
        parameters_schema=tool.parameters_schema,
        source=registry.source(name),
        read_only=tool.read_only,
        concurrency_safe=tool.concurrency_safe,
        idempotent=tool.idempotent,
        requires_approval=registry.requires_approval(name),
        timeout_s=tool.timeout_s,
        workers=getattr(tool, "workers", 0) if registry.source(name) == WORKER else 0,
        unsupported=registry.unsupported(name),
        unavailable_reason=unavailable,
    )


def spawn_agent() -> ToolInfo:
    """The sub-agent tool: idempotent (a repeated call finds its child), run in parallel."""
    return ToolInfo(
        name=sub_runs.SPAWN_TOOL,
        description=sub_runs.DESCRIPTION + SPAWN_NOTE,
        parameters_schema=sub_runs.SCHEMA,
        source=BUILTIN,
        read_only=False,
        concurrency_safe=True,
        idempotent=True,
        requires_approval=False,
        timeout_s=0.0,
    )


def providers(registry: ProviderRegistry) -> list[ProviderInfo]:
    """Every configured provider, by name, with its models by name."""
    return [_provider(registry.config(name)) for name in registry.names()]


def _provider(config: ProviderConfig) -> ProviderInfo:
    known = dict(config.models)
    if config.type == "local":
        # The local provider answers these whether or not a table describes them.
        for model in LOCAL_MODELS:
            known.setdefault(model, ConfiguredModel())
    return ProviderInfo(
        name=config.name,
        type=config.type,
        base_url=config.base_url,
        default_model=config.default_model,
        models=tuple(_model(name, config.model_info(name)) for name in sorted(known)),
    )


def _model(name: str, info: ConfiguredModel) -> ModelInfo:
    return ModelInfo(
        name=name,
        context_window=info.context_window,
        max_output_tokens=info.max_output_tokens,
        prices=info.prices,
        input_media=info.input_media or (),
    )
