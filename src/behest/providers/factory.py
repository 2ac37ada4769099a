"""Builds the provider registry from settings: `local` always, plus the configured ones."""

from __future__ import annotations

from collections.abc import Iterable

from behest.providers.base import Provider
from behest.providers.config import ProviderConfig
from behest.providers.local import LocalProvider
from behest.providers.registry import ProviderRegistry
from behest.providers.retry import RetryPolicy


def build_provider(config: ProviderConfig) -> Provider:
    """The adapter for one configured provider (SDK clients are created here, once)."""
    match config.type:
        case "local":
            return LocalProvider(name=config.name)
        case "openai":
            from behest.providers.openai import OpenAIProvider

            return OpenAIProvider(config)
        case "anthropic":
            from behest.providers.anthropic import AnthropicProvider

            return AnthropicProvider(config)
    raise ValueError(f"provider {config.name!r}: unknown type {config.type!r}")


def build_registry(
    configs: Iterable[ProviderConfig], *, retry: RetryPolicy, timeout_s: float
) -> ProviderRegistry:
    """`local` (unless configured otherwise) and every configured provider."""
    configs = list(configs)
    if not any(c.name == "local" for c in configs):
        configs.insert(
            0, ProviderConfig(name="local", type="local", retry=retry, timeout_s=timeout_s)
        )
    return ProviderRegistry((build_provider(c), c) for c in configs)
