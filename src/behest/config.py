"""One settings object, built once at start-up from defaults, a TOML file and BEHEST_* env."""

from __future__ import annotations

import math
import os
import socket
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from behest.providers.config import ProviderConfig, parse_providers
from behest.providers.retry import RetryPolicy
from behest.tools.mcp_config import McpServerConfig, parse_mcp_servers

DEFAULT_LISTEN = "127.0.0.1:50051"


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Every knob behest has. Env: BEHEST_<FIELD NAME IN CAPITALS>; TOML: the field name."""

    listen: str = DEFAULT_LISTEN
    data_dir: str = "./data"
    # Empty: a SQLite file in data_dir. Or e.g. postgresql+asyncpg://user@host/db.
    database_url: str = ""
    log_level: str = "INFO"
    log_format: str = "json"
    # Runs executing at once in this process; more → RESOURCE_EXHAUSTED.
    max_concurrent_runs: int = 256
    # Open server streams (CreateRunStream + WatchRunEvents); more → RESOURCE_EXHAUSTED.
    max_streams: int = 10_000
    # Group commit: the writer flushes when this many writes wait or after this many ms.
    commit_batch_max: int = 500
    commit_window_ms: float = 0.0
    # Text deltas that arrive while the run's previous one is being committed join into one
    # TextDelta event (same text); off: one event per model delta.
    coalesce_text_deltas: bool = True
    # Serve on uvloop when it is installed (it is a dependency on Linux and macOS).
    use_uvloop: bool = True
    # Request bounds (bytes of UTF-8).
    max_input_bytes: int = 256 * 1024
    max_metadata_bytes: int = 16 * 1024
    max_request_id_bytes: int = 256
    max_receive_message_bytes: int = 4 * 1024 * 1024
    # The agent loop.
    max_iterations: int = 10
    provider_timeout_s: float = 60.0
    provider_max_attempts: int = 4
    provider_backoff_initial_s: float = 0.5
    provider_backoff_max_s: float = 8.0
    provider_max_retry_after_s: float = 60.0
    # Tools: calls of concurrency-safe tools run this many at once; read_file reads below
    # read_file_root (off when empty); plugins come from the entry-point group behest.tools.
    tool_concurrency: int = 4
    read_file_root: str = ""
    load_tool_plugins: bool = True
    # Model providers besides `local` ([providers.NAME] tables of the settings file).
    providers: tuple[ProviderConfig, ...] = ()
    # MCP servers whose tools behest offers ([mcp.servers.NAME] tables), and how long each
    # may take to start before it is reported failed.
    mcp_servers: tuple[McpServerConfig, ...] = ()
    mcp_start_timeout_s: float = 30.0
    # This node's name in run claims; replicas sharing a database need distinct names.
    node_id: str = field(default_factory=socket.gethostname)
    # How long a node's claim on a run lasts without renewal (renewed every third of it);
    # runs of a node gone silent that long are resumed by another.
    run_lease_s: float = 30.0
    # Resume interrupted runs at start-up (and adopt those of vanished nodes). Off: they wait
    # in ListSnapshots until resumed by a later start, cancelled, or abandoned (DeleteSnapshot).
    resume_runs: bool = True
    # An open compaction circuit breaker closes again after this many seconds.
    compaction_cooldown_s: float = 300.0
    # Seconds in-flight runs get to finish on SIGTERM before they are left resumable.
    shutdown_grace_s: float = 10.0

    @classmethod
    def load(cls, *, config_file: str | None = None, **overrides: Any) -> Settings:
        """Defaults, then the TOML file (BEHEST_CONFIG if not given), then env, then overrides."""
        settings = cls()
        path = config_file or os.environ.get("BEHEST_CONFIG")
        tables: dict[str, Any] = {}
        if path:
            with Path(path).open("rb") as fh:
                data = tomllib.load(fh)
            tables = {k: v for k, v in data.items() if isinstance(v, dict) and k != "behest"}
            settings = settings.with_values(data.get("behest", data), source=str(path))
        env = {
            f.name: os.environ[f"BEHEST_{f.name.upper()}"]
            for f in fields(cls)
            if f"BEHEST_{f.name.upper()}" in os.environ
        }
        settings = settings.with_values(env, source="environment")
        settings = settings.with_values(
            {k: v for k, v in overrides.items() if v is not None}, source="arguments"
        )
        return settings.with_tables(tables, source=str(path))

    def with_tables(self, tables: dict[str, Any], *, source: str) -> Settings:
        """A copy with the settings file's tables ([providers.*]) parsed."""
        unknown = sorted(set(tables) - {"providers", "mcp"})
        if unknown:
            raise ValueError(f"{source}: unknown table(s) {unknown}")
        try:
            providers = parse_providers(
                tables.get("providers", {}),
                defaults=self.retry_policy,
                timeout_s=self.provider_timeout_s,
            )
            mcp = tables.get("mcp", {})
            if set(mcp) - {"servers"}:
                raise ValueError("the [mcp] table may only hold [mcp.servers.NAME] tables")
            mcp_servers = parse_mcp_servers(mcp.get("servers", {}))
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None
        return replace(self, providers=tuple(providers), mcp_servers=tuple(mcp_servers))

    @property
    def retry_policy(self) -> RetryPolicy:
        """The default retry policy of providers that set none."""
        return RetryPolicy(
            max_attempts=self.provider_max_attempts,
            backoff_initial_s=self.provider_backoff_initial_s,
            backoff_max_s=self.provider_backoff_max_s,
            max_retry_after_s=self.provider_max_retry_after_s,
        )

    def with_values(self, values: dict[str, Any], *, source: str) -> Settings:
        """A copy with `values` applied, each converted to its field's type."""
        known = {f.name: f for f in fields(self)}
        changes: dict[str, Any] = {}
        for name, raw in values.items():
            if name not in known or name in ("providers", "mcp_servers"):
                if isinstance(raw, dict):
                    continue  # tables are parsed by with_tables
                raise ValueError(f"{source}: unknown setting {name!r}")
            kind = type(getattr(self, name))
            try:
                changes[name] = _convert(raw, kind)
            except ValueError as exc:
                raise ValueError(f"{source}: setting {name!r}: {exc}") from None
        return replace(self, **changes)

    @property
    def sqlite_path(self) -> Path:
        return Path(self.data_dir) / "behest.db"

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{self.sqlite_path}"


def _convert(raw: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected a boolean, got {raw!r}")
    if kind is int:
        return int(raw)
    if kind is float:
        value = float(raw)
        if not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {raw!r}")
        return value
    return str(raw)
