"""Tools shipped as Python packages, found through the entry-point group `behest.tools`.

An entry point names a Tool, or a callable returning a Tool or a list of Tools:

    [project.entry-points."behest.tools"]
    weather = "my_package.tools:weather_tool"
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points

from behest.tools.base import Tool

log = logging.getLogger(__name__)

GROUP = "behest.tools"


def plugin_tools() -> list[Tool]:
    """Every tool the installed plugins provide; a broken plugin is logged and skipped."""
    found: list[Tool] = []
    for entry in entry_points(group=GROUP):
        try:
            loaded = entry.load()
            provided = loaded() if callable(loaded) and not isinstance(loaded, Tool) else loaded
            tools = list(provided) if isinstance(provided, list | tuple) else [provided]
            for tool in tools:
                if not isinstance(tool, Tool):
                    raise TypeError(f"{tool!r} is not a behest Tool")
            found.extend(tools)
        except Exception as exc:
            log.error(
                "tool plugin failed to load; its tools are not available",
                extra={"entry_point": entry.name, "value": entry.value, "error": str(exc)},
            )
    return found
