"""Structured logs: one JSON object per line on stderr (or plain text for humans).

Every JSON line of a server names its node (`tag`): the node id, which is also the
service.instance.id of its spans and metrics (telemetry.py).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
# Fields on every JSON line of this process from `tag` on.
_EVERY_LINE: dict[str, str] = {}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_EVERY_LINE,
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


# Libraries whose DEBUG lines carry what behest must not log (an HTTP client's request and
# response headers, where a provider may echo a key; a database driver's parameters, user
# data): they log at WARNING and above whatever behest's own level.
QUIET = (
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "hpack",
    "h2",
    "openai",
    "anthropic",
    "aiosqlite",
    "asyncpg",
    "sqlalchemy",
    "mcp",
    "urllib3",
)


def tag(**fields: str) -> None:
    """Put `fields` on every JSON line this process writes from now on (its node id)."""
    _EVERY_LINE.update(fields)


def setup(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
