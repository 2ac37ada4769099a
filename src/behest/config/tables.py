"""The settings' tables: [auth] (tokens, JWTs, mTLS), [tls] and [tenants.*], each a strict
pydantic model that Settings holds."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from behest.domain.spend import MAX_AMOUNT, parse_amount

_STRICT = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class TokenConfig(BaseModel):
    """A bearer token that may call: `[auth.tokens.NAME]`. Only its SHA-256 is configured."""

    model_config = _STRICT

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    principal: str = Field(min_length=1)
    tenant: str = Field(min_length=1)
    # Roles of its principal, e.g. the approver role (`[auth] approver_role`).
    roles: tuple[str, ...] = ()


class JwtConfig(BaseModel):
    """JWT bearer tokens: `[auth.jwt]`, verified with a public key or a JWKS file."""

    model_config = _STRICT

    public_key_file: str = ""
    jwks_file: str = ""
    issuer: str = ""
    audience: str = ""
    algorithms: tuple[str, ...] = ("RS256", "ES256", "EdDSA")
    tenant_claim: str = "tenant"
    principal_claim: str = "sub"
    # A claim holding the principal's roles: a list of strings, or one space-separated string.
    roles_claim: str = "roles"
    leeway_s: float = Field(default=30.0, ge=0)


class AuthSettings(BaseModel):
    """Who may call: `[auth]`."""

    model_config = _STRICT

    # none: every caller is the default tenant (only on loopback unless allow_insecure);
    # bearer: `authorization: Bearer …` with a configured token or a JWT; mtls: the client
    # certificate (TLS with client_ca_file) names the principal and tenant.
    mode: Literal["none", "bearer", "mtls"] = "none"
    # Listen off loopback without authentication and TLS anyway.
    allow_insecure: bool = False
    # Health checks and reflection need credentials too (by default anyone may call them).
    protect_health: bool = False
    tokens: dict[str, TokenConfig] = Field(default_factory=dict)
    jwt: JwtConfig | None = None
    # Only callers with this role may decide approvals (SubmitApprovals); empty: any caller
    # of the run's tenant may.
    approver_role: str = ""
    # Reconciling executions whose outcome is unknown needs this role (none: anyone may).
    reconciler_role: str = ""
    # Serving tools as a worker (WorkerService) needs this role (none: any principal may).
    worker_role: str = ""
    # With bearer tokens, scraping /metrics (metrics_listen) needs a caller with this role;
    # empty: any valid token. (mtls: a client certificate; none: open, on loopback.)
    metrics_role: str = "metrics"


class TlsSettings(BaseModel):
    """TLS of the gRPC port: `[tls]`; with `client_ca_file`, clients need a certificate."""

    model_config = _STRICT

    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""
    # mTLS: the client certificate's subject attribute that names its tenant (its CN, or else
    # its first DNS or URI SAN, names the principal).
    tenant_attribute: Literal["O", "OU", "CN", "L", "ST", "C"] = "O"

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file)


def _amount(value: object) -> str:
    """A decimal amount of money, as a string (never a float): "" or a finite one >= 0."""
    if value != "":
        parse_amount(value, maximum=MAX_AMOUNT)
    return value  # type: ignore[return-value]  # parse_amount refused anything but a str


# Money in settings: a decimal string; "" means none.
Amount = Annotated[str, BeforeValidator(_amount)]


class TenantLimits(BaseModel):
    """One tenant's admission limits: `[tenants.NAME]`; unset ones take the server's."""

    model_config = _STRICT

    max_concurrent_runs: int | None = Field(default=None, ge=1)
    max_streams: int | None = Field(default=None, ge=1)
    creates_per_minute: float | None = Field(default=None, ge=0)
    max_request_bytes: int | None = Field(default=None, ge=1)
    max_input_bytes: int | None = Field(default=None, ge=1)
    max_metadata_bytes: int | None = Field(default=None, ge=1)
    # Budgets: each run's defaults (a run's own budget overrides them), and daily caps over
    # all the tenant's runs (UTC days); unset: the server's.
    run_max_tokens: int | None = Field(default=None, ge=0)
    run_max_tool_calls: int | None = Field(default=None, ge=0)
    run_max_wall_seconds: int | None = Field(default=None, ge=0)
    run_max_cost: Amount | None = None
    daily_max_tokens: int | None = Field(default=None, ge=0)
    daily_max_cost: Amount | None = None


class ToolPolicyTable(BaseModel):
    """A `[tool_policies.NAME]` table: how a built-in, plugin or MCP tool's calls are retried
    (a call whose result is a retryable error runs again, up to max_attempts executions) and
    how long each attempt may run (0: the tool's own timeout)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(default=1, ge=1, le=10)
    backoff_initial_s: float = Field(default=0.5, ge=0, le=3600, allow_inf_nan=False)
    backoff_max_s: float = Field(default=10.0, ge=0, le=3600, allow_inf_nan=False)
    timeout_s: float = Field(default=0.0, ge=0, le=86_400, allow_inf_nan=False)
