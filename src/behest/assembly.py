"""What the composition root (app.py) builds straight from the settings: the tool registry
(built-ins, plugins, their policies), the telemetry, and the worker hub."""

from __future__ import annotations

import os

from behest.config import Settings
from behest.observability import telemetry
from behest.runs.worker_hub import HubSettings, WorkerHub
from behest.store.base import Store
from behest.tools.base import ToolPolicy
from behest.tools.builtin import builtin_tools
from behest.tools.plugins import plugin_tools
from behest.tools.registry import PLUGIN, ToolRegistry


def tools_from(settings: Settings) -> ToolRegistry:
    """The built-in tools and, when allowed, the installed plugins' (MCP tools join at start)."""
    policies = {
        name: ToolPolicy(**table.model_dump()) for name, table in settings.tool_policies.items()
    }
    tools = ToolRegistry(
        builtin_tools(read_file_root=settings.read_file_root),
        approval_required=settings.approval_required_tools,
        policies=policies,
    )
    if settings.load_tool_plugins:
        for tool in plugin_tools():
            tools.add(tool, source=PLUGIN)
    return tools


def telemetry_from(settings: Settings, *, instance: str) -> telemetry.Telemetry:
    """The Telemetry the settings (and the process's OTEL_* environment) ask for;
    `instance`: this process's node name (service.instance.id)."""
    exporting = telemetry.Exporting(
        otlp_endpoint=settings.otlp_endpoint,
        otlp_protocol=settings.otlp_protocol,
        metrics_listen=settings.metrics_listen,
        trace_content=settings.trace_content,
        instance=instance or settings.node_id,
    )
    return telemetry.Telemetry(exporting, os.environ)


def worker_hub(settings: Settings, store: Store, node: str) -> WorkerHub:
    """This process's side of workers (runs/worker_hub.py), as the settings bound it."""
    limits = HubSettings(
        heartbeat_s=settings.worker_heartbeat_s,
        poll_s=settings.worker_poll_s,
        max_workers_per_tenant=settings.max_workers_per_tenant,
        max_queued_tasks_per_tenant=settings.max_queued_tasks_per_tenant,
    )
    return WorkerHub(store=store, node=node, settings=limits)
