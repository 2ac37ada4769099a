"""Named model providers from the settings file: type, endpoint, key, models, retry policy.

    [providers.openai]
    type = "openai"                      # openai | anthropic | local
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"       # or api_key_file = "/run/secrets/openai"
    default_model = "gpt-4o-mini"
    timeout_s = 60
    max_attempts = 4                     # and backoff_initial_s, backoff_max_s,
                                         # max_retry_after_s (see providers/retry.py)
    currency = "USD"                     # of the prices below: 3 capital letters
    [providers.openai.models."gpt-4o-mini"]
    context_window = 128000
    max_output_tokens = 16384
    input_price = "0.15"                 # per million tokens, as decimal strings (exact)
    output_price = "0.60"
    cached_input_price = "0.075"         # optional; default: input_price
    cache_write_price = "0.15"           # optional; default: input_price
    [providers.claude]
    type = "anthropic"
    cache_breakpoints = ["tools", "instructions", "transcript"]  # prompt caching: where
                                         # cache_control breakpoints go (default: all three)
    [providers.claude.models."claude-sonnet-4-5"]
    input_media = ["image/*", "application/pdf"]  # what it takes beside text (content
                                         # parts); default by type: DEFAULT_INPUT_MEDIA;
                                         # [] for a text-only model

Prices are optional, but input_price and output_price come together; a model without them
has no cost. A `local` provider takes model tables too, for its models `echo` and `script`.
The key is read once at start-up and kept out of every repr, log line and event.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from behest.domain.content import ContentPart, PartKind
from behest.domain.spend import Prices, parse_amount
from behest.providers.local import KNOWN_MODELS as LOCAL_MODELS
from behest.providers.retry import RetryPolicy

TYPES = ("openai", "anthropic", "local")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_CURRENCY = re.compile(r"[A-Z]{3}")
_MEDIA = re.compile(r"(\*|[a-z0-9.+-]{1,64})/(\*|[a-z0-9.+-]{1,64})")
# Far above any model's price per million tokens: a bigger one is a typo.
MAX_PRICE = Decimal(1_000_000)
_LIMITS = ("context_window", "max_output_tokens")
_PRICES = ("input_price", "output_price", "cached_input_price", "cache_write_price")
_KEYS = {
    "type",
    "currency",
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
    "cache_breakpoints",
}
# Where an anthropic provider puts prompt-cache breakpoints (cache_control), by default all.
CACHE_BREAKPOINTS = ("tools", "instructions", "transcript")


# What a model of each provider type takes beside text, unless its settings say
# (`input_media`): media types, "image/*" for any image; an image by URL needs an image type.
DEFAULT_INPUT_MEDIA = {
    "openai": ("image/*", "application/pdf"),
    "anthropic": ("image/*", "application/pdf", "text/plain"),
    "local": ("*/*",),
}


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What behest needs to know of a model: its context window, output limit, prices, and
    the media it takes beside text (None: its provider type's DEFAULT_INPUT_MEDIA)."""

    context_window: int = 128_000
    max_output_tokens: int = 4096
    prices: Prices | None = None
    input_media: tuple[str, ...] | None = None

    def takes(self, part: ContentPart) -> bool:
        """Whether the model takes `part` (text always)."""
        if part.kind == PartKind.TEXT:
            return True
        media = part.media_type or "image/*"  # an image by URL, of a type not given
        return any(fnmatch.fnmatchcase(media, taken) for taken in self.input_media or ())


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderConfig:
    """One configured provider; `name` is the ProviderId clients send."""

    name: str
    type: str
    base_url: str = ""
    api_key: str = field(default="", repr=False)
    default_model: str = ""
    currency: str = "USD"
    models: dict[str, ModelInfo] = field(default_factory=dict)
    timeout_s: float = 60.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Anthropic prompt caching: which of CACHE_BREAKPOINTS get a cache_control breakpoint.
    cache_breakpoints: tuple[str, ...] = ()

    def model_info(self, model: str) -> ModelInfo:
        info = self.models.get(model, ModelInfo())
        if info.input_media is None:
            return replace(info, input_media=DEFAULT_INPUT_MEDIA.get(self.type, ()))
        return info


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
    currency = raw.get("currency", "USD")
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise ValueError(f'{where}.currency must be 3 capital letters (ISO 4217), e.g. "USD"')
    return ProviderConfig(
        name=name,
        type=kind,
        base_url=str(raw.get("base_url", "")),
        api_key=_api_key(where, raw),
        default_model=str(raw.get("default_model", "")),
        currency=currency,
        models=_models(where, kind, raw.get("models"), currency),
        timeout_s=_seconds(where, raw, "timeout_s", timeout_s),
        cache_breakpoints=_breakpoints(where, kind, raw),
        retry=RetryPolicy(
            max_attempts=int(raw.get("max_attempts", defaults.max_attempts)),
            backoff_initial_s=_seconds(where, raw, "backoff_initial_s", defaults.backoff_initial_s),
            backoff_max_s=_seconds(where, raw, "backoff_max_s", defaults.backoff_max_s),
            max_retry_after_s=_seconds(where, raw, "max_retry_after_s", defaults.max_retry_after_s),
        ),
    )


def _models(where: str, kind: str, raw: Any, currency: str) -> dict[str, ModelInfo]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{where}.models must be a table of models")
    models = {}
    for model, info in raw.items():
        at = f'{where}.models."{model}"'
        if kind == "local" and model not in LOCAL_MODELS:
            # The local provider answers only these; a table for another name is a typo.
            raise ValueError(f"{at}: a local provider's models are {', '.join(LOCAL_MODELS)}")
        if not isinstance(info, dict) or set(info) - {*_LIMITS, *_PRICES, "input_media"}:
            raise ValueError(f"{at} may set {', '.join(_LIMITS + _PRICES)}, input_media only")
        limits = {key: _limit(at, key, info[key]) for key in _LIMITS if key in info}
        models[model] = ModelInfo(
            **limits,
            prices=_prices(at, info, currency),
            input_media=_media(at, info["input_media"]) if "input_media" in info else None,
        )
    return models


def _breakpoints(where: str, kind: str, raw: dict[str, Any]) -> tuple[str, ...]:
    """An anthropic provider's cache_breakpoints (default all); others cache by themselves."""
    if "cache_breakpoints" not in raw:
        return CACHE_BREAKPOINTS if kind == "anthropic" else ()
    value = raw["cache_breakpoints"]
    if kind != "anthropic":
        raise ValueError(
            f"{where}.cache_breakpoints: only an anthropic provider takes them (OpenAI caches "
            "long prompts by itself, and reports the cached tokens)"
        )
    if not isinstance(value, list) or not set(value) <= set(CACHE_BREAKPOINTS):
        raise ValueError(
            f"{where}.cache_breakpoints must be a list of {', '.join(CACHE_BREAKPOINTS)} "
            f"([] for none); got {value!r}"
        )
    return tuple(value)


def _media(at: str, value: Any) -> tuple[str, ...]:
    """A model's input_media: media types ("image/png", "image/*", "application/pdf")."""
    if not isinstance(value, list) or not all(
        isinstance(m, str) and _MEDIA.fullmatch(m) for m in value
    ):
        raise ValueError(
            f'{at}.input_media must be a list of media types, e.g. ["image/*", '
            f'"application/pdf"] ([] for text only); got {value!r}'
        )
    return tuple(value)


def _limit(at: str, key: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        number = -1
    if isinstance(value, bool) or number < 0:
        raise ValueError(f"{at}.{key} must be a whole number of tokens, got {value!r}")
    return number


def _prices(at: str, info: dict[str, Any], currency: str) -> Prices | None:
    """A model's prices, or None when it sets none; input and output come together."""
    given = {key: _price(at, key, info[key]) for key in _PRICES if key in info}
    if not given:
        return None
    missing = [key for key in _PRICES[:2] if key not in given]
    if missing:
        raise ValueError(
            f"{at}: {' and '.join(missing)} missing; a model's prices need both "
            "input_price and output_price"
        )
    return Prices(
        input=given["input_price"],
        output=given["output_price"],
        cached_input=given.get("cached_input_price"),
        cache_write=given.get("cache_write_price"),
        currency=currency,
    )


def _price(at: str, key: str, value: Any) -> Decimal:
    if not isinstance(value, str):
        # A TOML float is binary: 0.15 is not 0.15, and money must be exact.
        raise ValueError(
            f'{at}.{key}: prices are decimal strings, e.g. input_price = "0.15", '
            f"never floats; got {value!r}"
        )
    try:
        return parse_amount(value, maximum=MAX_PRICE)
    except ValueError:
        raise ValueError(
            f"{at}.{key} must be a decimal price per million tokens from 0 to {MAX_PRICE}, "
            f'e.g. "0.15"; got {value!r}'
        ) from None


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
