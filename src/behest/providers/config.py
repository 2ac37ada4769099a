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
Unset retry fields and timeout_s take the server's provider_* settings.

Each table is a strict pydantic model (ProviderTable, ModelTable) that Settings holds and
checks with every other setting; `ProviderTable.config` gives the frozen ProviderConfig the
adapters use. The key is read once, when the table is checked at start-up, and kept out of
every repr, log line, event and error.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

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
_PRICES = ("input_price", "output_price", "cached_input_price", "cache_write_price")
# Where an anthropic provider puts prompt-cache breakpoints (cache_control), by default all.
CACHE_BREAKPOINTS = ("tools", "instructions", "transcript")
DEFAULT_CONTEXT_WINDOW = 128_000
DEFAULT_MAX_OUTPUT_TOKENS = 4096
T = TypeVar("T")


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

    context_window: int = DEFAULT_CONTEXT_WINDOW
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
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


# --- the checks of single values; Settings' errors name the table and the key ------------


def _name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError("a provider's name may use letters, digits, '_', '-' and '.'")
    return value


def _type(value: object) -> object:
    if value not in TYPES:
        raise ValueError(f"must be one of {', '.join(TYPES)}")
    return value


def _currency(value: object) -> object:
    if not isinstance(value, str) or not _CURRENCY.fullmatch(value):
        raise ValueError('must be 3 capital letters (ISO 4217), e.g. "USD"')
    return value


def _env_name(value: str) -> str:
    if value and not _ENV_NAME.match(value):
        # Not a variable's name: most likely the key itself, which must not be echoed.
        raise ValueError("must name an environment variable (A-Z, 0-9, _), not hold the key")
    return value


def _tokens(value: object) -> int:
    try:
        number = int(value)  # type: ignore[call-overload]  # anything else is refused below
    except (TypeError, ValueError, OverflowError):
        number = -1
    if isinstance(value, bool) or number < 0:
        raise ValueError("must be a whole number of tokens")
    return number


def _price(value: object) -> Decimal:
    if isinstance(value, Decimal):  # checked before (a copy of the settings)
        value = str(value)
    if not isinstance(value, str):
        # A TOML float is binary: 0.15 is not 0.15, and money must be exact.
        raise ValueError('prices are decimal strings, e.g. input_price = "0.15", never floats')
    try:
        return parse_amount(value, maximum=MAX_PRICE)
    except ValueError:
        raise ValueError(
            f'must be a decimal price per million tokens from 0 to {MAX_PRICE}, e.g. "0.15"'
        ) from None


def _media(value: object) -> tuple[str, ...]:
    """A model's input_media: media types ("image/png", "image/*", "application/pdf")."""
    if not isinstance(value, list | tuple) or not all(
        isinstance(m, str) and _MEDIA.fullmatch(m) for m in value
    ):
        raise ValueError(
            'must be a list of media types, e.g. ["image/*", "application/pdf"] ([] for text only)'
        )
    return tuple(value)


def _breakpoints(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not set(value) <= set(CACHE_BREAKPOINTS):
        raise ValueError(f"must be a list of {', '.join(CACHE_BREAKPOINTS)} ([] for none)")
    return tuple(value)


ProviderName = Annotated[str, AfterValidator(_name)]
Tokens = Annotated[int, BeforeValidator(_tokens)]
Price = Annotated[Decimal, BeforeValidator(_price)]
Seconds = Annotated[float, Field(ge=0)]
_STRICT = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class ModelTable(BaseModel):
    """One `[providers.NAME.models."MODEL"]` table."""

    model_config = _STRICT

    context_window: Tokens = DEFAULT_CONTEXT_WINDOW
    max_output_tokens: Tokens = DEFAULT_MAX_OUTPUT_TOKENS
    input_price: Price | None = None
    output_price: Price | None = None
    cached_input_price: Price | None = None
    cache_write_price: Price | None = None
    input_media: Annotated[tuple[str, ...], BeforeValidator(_media)] | None = None

    @model_validator(mode="after")
    def _prices_together(self) -> ModelTable:
        """Prices are optional, but input_price and output_price come together."""
        given = [key for key in _PRICES if getattr(self, key) is not None]
        missing = [key for key in _PRICES[:2] if key not in given]
        if given and missing:
            raise ValueError(
                f"{' and '.join(missing)} missing; a model's prices need both "
                "input_price and output_price"
            )
        return self

    def info(self, currency: str) -> ModelInfo:
        prices = None
        if self.input_price is not None and self.output_price is not None:
            prices = Prices(
                input=self.input_price,
                output=self.output_price,
                cached_input=self.cached_input_price,
                cache_write=self.cache_write_price,
                currency=currency,
            )
        return ModelInfo(self.context_window, self.max_output_tokens, prices, self.input_media)


class ProviderTable(BaseModel):
    """One `[providers.NAME]` table; unset retry fields and timeout_s take the server's."""

    model_config = _STRICT

    type: Annotated[Literal["openai", "anthropic", "local"], BeforeValidator(_type)]
    currency: Annotated[str, BeforeValidator(_currency)] = "USD"
    base_url: str = ""
    api_key_env: Annotated[str, AfterValidator(_env_name)] = ""
    api_key_file: str = ""
    default_model: str = ""
    models: dict[str, ModelTable] = Field(default_factory=dict)
    timeout_s: Seconds | None = None
    max_attempts: int | None = Field(default=None, ge=1)
    backoff_initial_s: Seconds | None = None
    backoff_max_s: Seconds | None = None
    max_retry_after_s: Seconds | None = None
    # Only an anthropic provider's; unset: all of CACHE_BREAKPOINTS.
    cache_breakpoints: Annotated[tuple[str, ...], BeforeValidator(_breakpoints)] | None = None
    # Read from api_key_env or api_key_file when the table is checked; never dumped or shown.
    _api_key: str = PrivateAttr(default="")

    @field_validator("models")
    @classmethod
    def _local_models(
        cls, models: dict[str, ModelTable], info: ValidationInfo
    ) -> dict[str, ModelTable]:
        unknown = [name for name in models if name not in LOCAL_MODELS]
        if info.data.get("type") == "local" and unknown:
            # The local provider answers only these; a table for another name is a typo.
            raise ValueError(
                f"a local provider's models are {', '.join(LOCAL_MODELS)}, not "
                f"{', '.join(map(repr, unknown))}"
            )
        return models

    @field_validator("cache_breakpoints")
    @classmethod
    def _anthropic_only(
        cls, value: tuple[str, ...] | None, info: ValidationInfo
    ) -> tuple[str, ...] | None:
        if value is not None and info.data.get("type", "anthropic") != "anthropic":
            raise ValueError(
                "only an anthropic provider takes them (OpenAI caches long prompts by "
                "itself, and reports the cached tokens)"
            )
        return value

    @model_validator(mode="after")
    def _read_key(self) -> ProviderTable:
        self._api_key = _api_key(self.api_key_env, self.api_key_file)
        return self

    def config(self, name: str, *, defaults: RetryPolicy, timeout_s: float) -> ProviderConfig:
        """The provider as its adapter takes it; `defaults` and `timeout_s` for unset fields."""
        breakpoints = self.cache_breakpoints
        if breakpoints is None:
            breakpoints = CACHE_BREAKPOINTS if self.type == "anthropic" else ()
        return ProviderConfig(
            name=name,
            type=self.type,
            base_url=self.base_url,
            api_key=self._api_key,
            default_model=self.default_model,
            currency=self.currency,
            models={model: table.info(self.currency) for model, table in self.models.items()},
            timeout_s=timeout_s if self.timeout_s is None else self.timeout_s,
            cache_breakpoints=breakpoints,
            retry=RetryPolicy(
                max_attempts=_or(self.max_attempts, defaults.max_attempts),
                backoff_initial_s=_or(self.backoff_initial_s, defaults.backoff_initial_s),
                backoff_max_s=_or(self.backoff_max_s, defaults.backoff_max_s),
                max_retry_after_s=_or(self.max_retry_after_s, defaults.max_retry_after_s),
            ),
        )


def _or(value: T | None, default: T) -> T:
    return default if value is None else value


def _api_key(env: str, file: str) -> str:
    """The key, from its environment variable or file (read once, at start-up)."""
    if env:
        value = os.environ.get(env, "")
        if not value:
            raise ValueError(f"api_key_env: environment variable {env} is not set")
        return value
    if file:
        try:
            return Path(file).read_text().strip()
        except OSError as exc:
            raise ValueError(f"api_key_file: cannot read it: {exc.strerror}") from None
    return ""
