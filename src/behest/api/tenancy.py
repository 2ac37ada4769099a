"""Each tenant's limits: its `[tenants.NAME]` settings where it has them, else the server's."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TypeVar

from behest.config import Settings, TenantLimits
from behest.domain.spend import DailyCaps, RunBudget, TenantSpend

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Limits:
    """What one tenant may do at once, and how big its requests may be."""

    max_concurrent_runs: int
    max_streams: int
    creates_per_minute: float  # 0: no limit
    max_request_bytes: int
    max_input_bytes: int
    max_metadata_bytes: int
    # Each run's default budget, and the caps over all the tenant's runs of a UTC day.
    spend: TenantSpend = field(default_factory=TenantSpend)


class Tenancy:
    """The limits of every tenant, resolved once each from the settings."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._limits: dict[str, Limits] = {}

    def limits(self, tenant: str) -> Limits:
        found = self._limits.get(tenant)
        if found is None:
            found = self._limits[tenant] = self._resolve(tenant)
        return found

    def _resolve(self, tenant: str) -> Limits:
        s = self._settings
        own = s.tenants.get(tenant) or TenantLimits()
        request_bytes = own.max_request_bytes or s.max_receive_message_bytes
        return Limits(
            max_concurrent_runs=own.max_concurrent_runs or s.max_concurrent_runs,
            max_streams=own.max_streams or s.max_streams,
            creates_per_minute=(
                s.creates_per_minute if own.creates_per_minute is None else own.creates_per_minute
            ),
            max_request_bytes=min(request_bytes, s.max_receive_message_bytes),
            max_input_bytes=own.max_input_bytes or s.max_input_bytes,
            max_metadata_bytes=own.max_metadata_bytes or s.max_metadata_bytes,
            spend=TenantSpend(
                run_budget=RunBudget(
                    max_tokens=_own(own.run_max_tokens, s.run_max_tokens),
                    max_tool_calls=_own(own.run_max_tool_calls, s.run_max_tool_calls),
                    max_wall_seconds=_own(own.run_max_wall_seconds, s.run_max_wall_seconds),
                    max_cost=_decimal(_own(own.run_max_cost, s.run_max_cost)),
                ),
                daily=DailyCaps(
                    max_tokens=_own(own.daily_max_tokens, s.daily_max_tokens),
                    max_cost=_decimal(_own(own.daily_max_cost, s.daily_max_cost)),
                ),
            ),
        )


def _own(value: T | None, server: T) -> T:
    """The tenant's value where it set one, else the server's."""
    return server if value is None else value


def _decimal(value: str) -> Decimal | None:
    return Decimal(value) if value else None
