"""One settings object, built once at start-up (pydantic-settings), passed down from there.

Sources, lowest first: defaults → a TOML file (`--config FILE` or BEHEST_CONFIG; plain keys at
top level or under `[behest]`, and the tables `[providers.*]`, `[mcp.servers.*]`, `[auth]`,
`[tls]`, `[tenants.*]`) → environment variables `BEHEST_<NAME>` (nested: `BEHEST_AUTH__MODE`)
→ command-line flags. Every value is typed and checked, the tables too, each a strict
pydantic model: [auth], [tls], [tenants.*] in tables.py, [providers.*] in providers/config.py
(API keys read once, when checked), [mcp] in tools/mcp_config.py. A bad one stops the start
with an error naming the setting and the value, unless that may be a secret (explain.py).
"""

from __future__ import annotations

import contextvars
import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from behest.config.explain import explain
from behest.config.exposure import check_exposed, check_http_listen, is_loopback
from behest.config.tables import (
    Amount,
    AuthSettings,
    JwtConfig,
    TenantLimits,
    TlsSettings,
    TokenConfig,
    ToolPolicyTable,
)
from behest.providers.config import ProviderConfig, ProviderName, ProviderTable
from behest.providers.retry import RetryPolicy
from behest.tools.mcp_config import McpServerConfig, McpSettings

__all__ = [
    "DEFAULT_LISTEN",
    "AuthSettings",
    "JwtConfig",
    "Settings",
    "TenantLimits",
    "TlsSettings",
    "TokenConfig",
    "is_loopback",
]

DEFAULT_LISTEN = "127.0.0.1:50051"


# The settings file of the Settings.load under way (pydantic-settings builds sources per class).
_CONFIG_FILE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "behest_config_file", default=None
)


class Settings(BaseSettings):
    """Every knob behest has. Env: BEHEST_<FIELD NAME IN CAPITALS>; TOML: the field name."""

    model_config = SettingsConfigDict(
        env_prefix="BEHEST_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,
        validate_default=True,
    )

    listen: str = DEFAULT_LISTEN
    data_dir: str = "./data"
    # Empty: a SQLite file in data_dir. Or e.g. postgresql+asyncpg://user@host/db.
    database_url: str = ""
    # SQLite: how long a write waits for another process's write lock on the file before it
    # fails as "locked" (the event loop never waits: writes wait on the writer's thread).
    sqlite_busy_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    log_level: str = "INFO"
    log_format: Literal["json", "text"] = "json"
    # Traces and metrics (telemetry.py; docs/OPERATIONS.md "Traces and metrics"). Spans and
    # metrics go over OTLP to otlp_endpoint, e.g. http://127.0.0.1:4317 for grpc or
    # http://127.0.0.1:4318 for http/protobuf (/v1/traces and /v1/metrics are added); empty:
    # the standard OTEL_EXPORTER_OTLP_* variables decide, and without them nothing is sent.
    otlp_endpoint: str = Field(default="", pattern=r"^(https?://\S+)?$")
    # grpc | http/protobuf; empty: OTEL_EXPORTER_OTLP_PROTOCOL, else grpc.
    otlp_protocol: Literal["", "grpc", "http/protobuf"] = ""
    # Spans carry message content (model input and output, tool arguments and results).
    trace_content: bool = False
    # host:port of a Prometheus scrape endpoint (/metrics), e.g. 127.0.0.1:9464; empty: none.
    metrics_listen: str = Field(default="", pattern=r"^(\S+:\d{1,5})?$")
    # host:port of the run inspector's HTTP side (web/; docs/INSPECTOR.md); empty: off. Under
    # the same [auth] and [tls] as the gRPC port (HTTPS when TLS is configured).
    http_listen: str = Field(default="", pattern=r"^(\S+:\d{1,5})?$")
    # Origins whose pages may call the HTTP doors (Connect, gRPC-Web, SSE, AG-UI) from a
    # browser, e.g. ["https://app.example.com"] (scheme, host and port, exactly); none: only
    # same-origin pages and non-browser clients (docs/HTTP.md).
    http_cors_origins: list[Annotated[str, Field(pattern=r"^https?://[^/\s]+$")]] = Field(
        default_factory=list, max_length=100
    )
    # Server-sent events on the HTTP listener (docs/HTTP.md): a comment goes out after each
    # quiet spell this long, so proxies keep the connection and a dead one is noticed; a stream
    # ticket (CreateStreamTicket) opens its run's stream for this long.
    sse_heartbeat_s: float = Field(default=15.0, gt=0, le=3600)
    stream_ticket_ttl_s: float = Field(default=300.0, gt=0, le=86_400)
    # Runs executing at once in this process; more → RESOURCE_EXHAUSTED. Per tenant too,
    # unless [tenants.NAME] sets less (so for every limit below that says "per tenant").
    max_concurrent_runs: int = Field(default=256, ge=1)
    # Open server streams (CreateRunStream + WatchRunEvents) per tenant; more →
    # RESOURCE_EXHAUSTED (unary RPCs never count).
    max_streams: int = Field(default=10_000, ge=1)
    # Run creations per minute and tenant (a token bucket of one minute's worth); 0: no limit.
    creates_per_minute: float = Field(default=0.0, ge=0)
    # Group commit: the writer flushes when this many writes wait or after this many ms.
    commit_batch_max: int = Field(default=500, ge=1)
    commit_window_ms: float = Field(default=0.0, ge=0)
    # Text deltas that arrive while the run's previous one is being committed join into one
    # TextDelta event (same text); off: one event per model delta.
    coalesce_text_deltas: bool = True
    # Serve on uvloop when it is installed (it is a dependency on Linux and macOS).
    use_uvloop: bool = True
    # Request bounds (bytes of UTF-8), per tenant; max_receive_message_bytes is the server's
    # (a tenant's max_request_bytes can only be lower).
    max_input_bytes: int = Field(default=256 * 1024, ge=1)
    max_metadata_bytes: int = Field(default=16 * 1024, ge=1)
    max_request_id_bytes: int = Field(default=256, ge=1)
    max_receive_message_bytes: int = Field(default=4 * 1024 * 1024, ge=1)
    # CreateRunRequest.content: parts per request, bytes of one image or file, and of all of
    # them together (within max_receive_message_bytes; text parts count as input).
    max_content_parts: int = Field(default=16, ge=0, le=1000)
    max_content_part_bytes: int = Field(default=2 * 1024 * 1024, ge=1)
    max_content_bytes: int = Field(default=3 * 1024 * 1024, ge=1)
    # The agent loop.
    max_iterations: int = Field(default=10, ge=1)
    provider_timeout_s: float = Field(default=60.0, gt=0)
    provider_max_attempts: int = Field(default=4, ge=1)
    provider_backoff_initial_s: float = Field(default=0.5, ge=0)
    provider_backoff_max_s: float = Field(default=8.0, ge=0)
    provider_max_retry_after_s: float = Field(default=60.0, ge=0)
    # Tools: calls of concurrency-safe tools run this many at once; read_file reads below
    # read_file_root (off when empty); plugins come from the entry-point group behest.tools.
    tool_concurrency: int = Field(default=4, ge=1)
    read_file_root: str = ""
    load_tool_plugins: bool = True
    # Budgets (per tenant too, in [tenants.NAME]): each run's default limits (a run's own
    # budget overrides them; 0 or "": none) and daily caps over all of a tenant's runs.
    run_max_tokens: int = Field(default=0, ge=0)
    run_max_tool_calls: int = Field(default=0, ge=0)
    run_max_wall_seconds: int = Field(default=0, ge=0)
    run_max_cost: Amount = ""
    daily_max_tokens: int = Field(default=0, ge=0)
    daily_max_cost: Amount = ""
    # Sub-agent runs (CreateRunRequest.allow_sub_agents): how deep they may nest (a run at
    # this depth is offered no spawn_agent), and how many children one run may start.
    sub_agent_max_depth: int = Field(default=2, ge=0, le=16)
    sub_agent_max_children: int = Field(default=8, ge=1, le=1000)
    # Runs that wait (SubmitApprovals, SubmitToolResults): tools whose every call needs an
    # approval (built-ins, plugins and MCP tools by the name the model sees), and how long an
    # approval or a client tool call waits by default before it is denied or errs. A run may
    # set its own timeouts, up to max_wait_s.
    approval_required_tools: tuple[str, ...] = ()
    # How the named built-in, plugin or MCP tools' calls are retried and bounded: the
    # [tool_policies.NAME] tables (max_attempts, backoff_initial_s, backoff_max_s, timeout_s).
    tool_policies: dict[str, ToolPolicyTable] = Field(default_factory=dict)
    approval_timeout_s: float = Field(default=86_400.0, gt=0)
    client_tool_timeout_s: float = Field(default=600.0, gt=0)
    # A run whose tool was cut by a stop and is not idempotent waits this long for the
    # execution to be reconciled (ReconcileToolExecution), then fails TOOL_OUTCOME_UNKNOWN.
    outcome_unknown_timeout_s: float = Field(default=86_400.0, gt=0)
    # A question a running tool asks the user (elicitation) waits this long at most, and
    # never past its tool's own timeout; then it is answered CANCEL (timed out).
    elicitation_timeout_s: float = Field(default=3600.0, gt=0)
    # Workers (WorkerService): how often they send heartbeats (a task's lease lasts three),
    # how often a replica looks for tasks and results other replicas wrote, and how many
    # workers one tenant may have connected.
    worker_heartbeat_s: float = Field(default=5.0, gt=0, le=3600)
    worker_poll_s: float = Field(default=0.25, gt=0, le=60)
    max_workers_per_tenant: int = Field(default=100, ge=1, le=100_000)
    # Calls of one tenant that may wait for a worker at once; more get an error result.
    max_queued_tasks_per_tenant: int = Field(default=10_000, ge=1, le=10_000_000)
    max_wait_s: float = Field(default=30 * 86_400.0, gt=0)
    # Model providers besides `local`: the [providers.NAME] tables (providers/config.py),
    # their keys read once; as the adapters take them: `provider_configs`.
    providers: dict[ProviderName, ProviderTable] = Field(default_factory=dict)
    # MCP servers whose tools behest offers ([mcp.servers.NAME] tables, tools/mcp_config.py;
    # as they are run: `mcp_servers`), how long one attempt to start one may take before it
    # is reported failed, and the longest wait between attempts (they go on forever).
    mcp: McpSettings = Field(default_factory=McpSettings)
    mcp_start_timeout_s: float = Field(default=30.0, gt=0)
    # Whether MCP servers' sampling requests are answered with the calling run's model; a
    # server's own `sampling = false` turns it off for that server alone.
    mcp_sampling: bool = True
    mcp_restart_max_s: float = Field(default=30.0, gt=0, le=3600)
    # Agents created or updated at every start ([agents.NAME] tables: an AgentDefinition's
    # fields by their proto names, and an optional `tenant`, default the default tenant);
    # a new version only when one changed. Checked at start like AgentService's requests.
    agents: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # This process's name in run claims. Unset: a name of its own (host-pid-random), so two
    # processes never act as one owner. Set (e.g. a StatefulSet pod's name): refused at start
    # while another live process holds it, and the runs it held are taken up at once after a
    # restart instead of when their leases lapse.
    node_id: str = Field(default="", max_length=200)
    # How long a node's claim on a run lasts without renewal (renewed every third of it);
    # runs of a node gone silent that long are resumed by another.
    run_lease_s: float = Field(default=30.0, gt=0)
    # Resume interrupted runs at start-up (and adopt those of vanished nodes). Off: they wait
    # in ListSnapshots until resumed by a later start, cancelled, or abandoned (DeleteSnapshot).
    resume_runs: bool = True
    # An open compaction circuit breaker closes again after this many seconds.
    compaction_cooldown_s: float = Field(default=300.0, ge=0)
    # Seconds in-flight runs get to finish on SIGTERM before they are left resumable.
    shutdown_grace_s: float = Field(default=10.0, ge=0)
    # Retention (retention.py): every retention_interval_s, finished runs last updated more
    # than retention_days ago are deleted with everything of them, retention_batch runs per
    # transaction, and then their sessions left empty. 0 days: off (runs are kept forever).
    retention_days: float = Field(default=0.0, ge=0)
    retention_interval_s: float = Field(default=3600.0, gt=0)
    retention_batch: int = Field(default=500, ge=1)
    # Who may call, over what, and how much each tenant may do.
    auth: AuthSettings = Field(default_factory=AuthSettings)
    tls: TlsSettings = Field(default_factory=TlsSettings)
    tenants: dict[str, TenantLimits] = Field(default_factory=dict)
    # The [providers.NAME] tables as the adapters take them, made once when checked.
    _provider_configs: tuple[ProviderConfig, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _made_once(self) -> Settings:
        """Each provider with the server's defaults for what its table does not set."""
        self._provider_configs = tuple(
            table.config(name, defaults=self.retry_policy, timeout_s=self.provider_timeout_s)
            for name, table in self.providers.items()
        )
        return self

    @model_validator(mode="after")
    def _safe_to_serve(self) -> Settings:
        """Settings that cannot work together, or that would expose the server, stop the start."""
        auth, tls = self.auth, self.tls
        if bool(tls.cert_file) != bool(tls.key_file):
            raise ValueError("tls: cert_file and key_file go together")
        if tls.client_ca_file and not tls.enabled:
            raise ValueError("tls: client_ca_file needs cert_file and key_file")
        if auth.mode == "mtls" and not tls.client_ca_file:
            raise ValueError("auth mode 'mtls' needs tls.client_ca_file (and cert_file, key_file)")
        if auth.mode == "bearer" and not auth.tokens and auth.jwt is None:
            raise ValueError("auth mode 'bearer' needs [auth.tokens.NAME] tables or [auth.jwt]")
        open_to_network = not is_loopback(self.listen.rpartition(":")[0])
        if open_to_network and (auth.mode == "none" or not tls.enabled) and not auth.allow_insecure:
            missing = (
                "authentication and TLS"
                if auth.mode == "none" and not tls.enabled
                else ("authentication" if auth.mode == "none" else "TLS")
            )
            raise ValueError(
                f"listen {self.listen!r} is not a loopback address, and the server has no "
                f"{missing}: anyone who reaches it could read and run everything. Set [auth] "
                "mode and [tls] cert_file/key_file, listen on 127.0.0.1, or set "
                "auth.allow_insecure = true if something else protects it"
            )
        check_http_listen(self.http_listen, self.auth, self.tls)
        check_exposed(
            self.auth, self.tls, "metrics_listen", self.metrics_listen, "read every metric"
        )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = _CONFIG_FILE.get()
        file = (_TomlFile(settings_cls, Path(path)),) if path else ()
        return (init_settings, env_settings, *file)

    @classmethod
    def load(cls, *, config_file: str | None = None, **overrides: Any) -> Settings:
        """Defaults, then the TOML file (BEHEST_CONFIG if not given), then env, then overrides.

        Raises ValueError naming the setting (and its value) that is wrong.
        """
        path = config_file or os.environ.get("BEHEST_CONFIG") or None
        token = _CONFIG_FILE.set(path)
        try:
            settings = cls(**{k: v for k, v in overrides.items() if v is not None})
        except ValidationError as exc:
            raise ValueError(explain(exc, path, cls)) from None
        finally:
            _CONFIG_FILE.reset(token)
        return settings

    def with_values(self, values: dict[str, Any], *, source: str) -> Settings:
        """A copy with `values` applied (checked as at start-up); tables included. Only what
        was set is carried over: a table's unset keys stay unset (an MCP server's `args`)."""
        data = {**self.model_dump(exclude_unset=True), **values}
        try:
            return type(self).model_validate(data)
        except ValidationError as exc:
            raise ValueError(explain(exc, source, type(self))) from None

    def with_tables(self, tables: dict[str, Any], *, source: str) -> Settings:
        """A copy with settings-file tables ([providers.*], [mcp], [auth], …) applied."""
        return self.with_values(tables, source=source)

    def provider_configs(self) -> tuple[ProviderConfig, ...]:
        """The [providers.NAME] tables as the adapters take them (keys read at the check)."""
        return self._provider_configs

    @property
    def mcp_servers(self) -> tuple[McpServerConfig, ...]:
        """The [mcp.servers.NAME] tables as the servers are run (mcp_sampling applied)."""
        return self.mcp.configs if self.mcp_sampling else self.mcp.unsampled

    @property
    def retry_policy(self) -> RetryPolicy:
        """The default retry policy of providers that set none."""
        return RetryPolicy(
            max_attempts=self.provider_max_attempts,
            backoff_initial_s=self.provider_backoff_initial_s,
            backoff_max_s=self.provider_backoff_max_s,
            max_retry_after_s=self.provider_max_retry_after_s,
        )

    @property
    def sqlite_path(self) -> Path:
        return Path(self.data_dir) / "behest.db"

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{self.sqlite_path}"


class _TomlFile(PydanticBaseSettingsSource):
    """The settings file: keys at top level or under [behest], and the tables beside them."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path) -> None:
        super().__init__(settings_cls)
        with path.open("rb") as fh:
            data = tomllib.load(fh)
        plain = data.pop("behest", {})
        self._data = {**data, **plain}

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)
