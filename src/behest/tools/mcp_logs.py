"""MCP log messages: a server's `notifications/message` go to behest's own log.

Each becomes one entry of behest's log (one JSON line, like every other) of the logger
`behest.tools.mcp.server`, tagged with the server (`mcp_server`), its MCP level (`mcp_level`)
and its logger (`mcp_logger`), at the Python level its MCP level maps to: notice is INFO,
critical, alert and emergency are CRITICAL. A server's `log_level` setting (default info) is
the least severe level behest asks for (on 2026-07-28 connections, by the per-request opt-in)
and keeps (older servers send what they like until told otherwise).
"""

from __future__ import annotations

import json
import logging

from mcp.client.session import LoggingFnT
from mcp.types import LoggingMessageNotificationParams

from behest import bounded_json
from behest.tools.mcp_config import McpServerConfig
from behest.wording import shorten

log = logging.getLogger("behest.tools.mcp.server")

# A log message's data is cut to this many characters.
MAX_LOGGED_CHARS = 4000
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}
_ORDER = list(LEVELS)  # the least severe first


def logging_callback(config: McpServerConfig) -> LoggingFnT:
    """The SDK's callback for the server's log messages: each logged, tagged with it."""
    least = _ORDER.index(config.log_level)

    async def logged(params: LoggingMessageNotificationParams) -> None:
        level = str(params.level)
        if level not in LEVELS or _ORDER.index(level) < least:
            return
        fields = {"mcp_server": config.name, "mcp_level": level, "mcp_logger": params.logger or ""}
        text = shorten(_text(params.data), MAX_LOGGED_CHARS)
        log.log(LEVELS[level], f"MCP server {config.name!r}: {text}", extra=fields)

    return logged


def _text(data: object) -> str:
    """A log message's data as text: a string as it is, anything else as JSON."""
    if isinstance(data, str):
        return data
    try:
        bounded_json.check_depth(data)
        return json.dumps(data, ensure_ascii=False, default=str)
    except (bounded_json.JsonRefused, ValueError, RecursionError) as exc:
        return f"[data that cannot be shown: {exc}]"
