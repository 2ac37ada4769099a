"""Named model providers from the settings file: type, endpoint, key, models, retry policy.

    [providers.openai]
    type = "openai"                      # openai | anthropic | local
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"       # or api_key_file = "/run/secrets/openai"
    default_model = "gpt-4o-mini"
    timeout_s = 60
    max_attempts = 4                     # and backoff_initial_s, backoff_max_s,
                                         # max_retry_after_s (see providers/retry.py)
    [providers.openai.models."gpt-4o-mini"]
    context_window = 128000
    max_output_tokens = 16384

The key is read once at start-up and kept out of every repr, log line and event.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from behest.providers.retry import RetryPolicy

TYPES = ("openai", "anthropic", "local")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_KEYS = {
    "type",
    "base_url",
    "api_key_env",
    "api_key_file",
    "default_model",
    "models",
    "timeout_s",
    "max_attempts",
    "backoff_initial_s",
    "backoff_max_s",
    "max_retry_after_s",
}


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What behest needs to know of a model: its context window and output limit."""

    context_window: int = 128_000
    max_output_tokens: int = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderConfig:
    """One configured provider; `name` is the ProviderId clients send."""

    name: str
    type: str
    base_url: str = ""
    api_key: str = field(default="", repr=False)
    default_model: str = ""
    models: dict[str, ModelInfo] = field(default_factory=dict)
    timeout_s: float = 60.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def model_info(self, model: str) -> ModelInfo:
        return self.models.get(model, ModelInfo())


def parse_providers(
    section: dict[str, Any], *, defaults: RetryPolicy, timeout_s: float
) -> list[ProviderConfig]:
    """Parse the `[providers.*]` tables; errors name the provider and the field."""
    return [
        _parse_one(name, raw, defaults=defaults, timeout_s=timeout_s)
        for name, raw in section.items()
    ]


def _parse_one(name: str, raw: Any, *, defaults: RetryPolicy, timeout_s: float) -> ProviderConfig:
    where = f"providers.{name}"
    if not _NAME.match(name):
        raise ValueError(f"{where}: names may use letters, digits, '_', '-' and '.'")
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a table")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}")
    kind = raw.get("type", "")
    if kind not in TYPES:
        raise ValueError(f"{where}.type must be one of {', '.join(TYPES)}")
    models = {}
    for model, info in (raw.get("models") or {}).items():
        if not isinstance(info, dict) or set(info) - {"context_window", "max_output_tokens"}:
            raise ValueError(
                f"{where}.models.{model} may set context_window and max_output_tokens only"
            )
        models[model] = ModelInfo(**{k: int(v) for k, v in info.items()})
    return ProviderConfig(
        name=name,
        type=kind,
        base_url=str(raw.get("base_url", "")),
        api_key=_api_key(where, raw),
        default_model=str(raw.get("default_model", "")),
        models=models,
        timeout_s=_seconds(where, raw, "timeout_s", timeout_s),
        retry=RetryPolicy(
            max_attempts=int(raw.get("max_attempts", defaults.max_attempts)),
            backoff_initial_s=_seconds(where, raw, "backoff_initial_s", defaults.backoff_initial_s),
            backoff_max_s=_seconds(where, raw, "backoff_max_s", defaults.backoff_max_s),
            max_retry_after_s=_seconds(where, raw, "max_retry_after_s", defaults.max_retry_after_s),
        ),
    )


def _seconds(where: str, raw: dict[str, Any], key: str, default: float) -> float:
    value = float(raw.get(key, default))
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}.{key} must be a finite number of seconds, got {value!r}")
    return value


def _api_key(where: str, raw: dict[str, Any]) -> str:
    if raw.get("api_key_env"):
        name = str(raw["api_key_env"])
        if not _ENV_NAME.match(name):
            # Not a variable's name: most likely the key itself, which must not be echoed.
            raise ValueError(
                f"{where}.api_key_env must name an environment variable (A-Z, 0-9, _), "
                "not hold the key"
            )
        value = os.environ.get(name, "")
        if not value:
            raise ValueError(f"{where}: environment variable {name} is not set")
        return value
    if raw.get("api_key_file"):
        try:
            return Path(raw["api_key_file"]).read_text().strip()
        except OSError as exc:
            raise ValueError(f"{where}: cannot read api_key_file: {exc.strerror}") from None
    return ""
