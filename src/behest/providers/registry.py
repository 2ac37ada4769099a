"""Configured providers by name (the ProviderId clients send)."""

from __future__ import annotations

from collections.abc import Iterable

from behest.errors import InvalidArgument, quote
from behest.providers.base import Provider
from behest.providers.config import ModelInfo, ProviderConfig
from behest.providers.retry import RetryPolicy


class ProviderRegistry:
    """Looks providers up by name and checks the models they offer."""

    def __init__(self, providers: Iterable[tuple[Provider, ProviderConfig]]) -> None:
        self._providers = {config.name: (provider, config) for provider, config in providers}

    def names(self) -> list[str]:
        return sorted(self._providers)

    def get(self, name: str) -> Provider:
        return self._entry(name)[0]

    def config(self, name: str) -> ProviderConfig:
        return self._entry(name)[1]

    def retry_policy(self, name: str) -> RetryPolicy:
        return self._entry(name)[1].retry

    def model_info(self, name: str, model: str) -> ModelInfo:
        return self._entry(name)[1].model_info(model)

    def check(self, name: str, model: str) -> None:
        """Raise InvalidArgument unless `name` is configured and offers `model`."""
        provider, config = self._entry(name)
        check_model = getattr(provider, "check_model", None)
        if check_model is not None:
            check_model(model)
        elif config.models and model not in config.models:
            known = ", ".join(sorted(config.models))
            raise InvalidArgument(
                f"model: unknown model {quote(model)} for provider {quote(name)} (known: {known})"
            )

    async def aclose(self) -> None:
        """Close every provider's connections."""
        for provider, _ in self._providers.values():
            await provider.aclose()

    def _entry(self, name: str) -> tuple[Provider, ProviderConfig]:
        entry = self._providers.get(name)
        if entry is None:
            raise InvalidArgument(
                f"provider: unknown provider {quote(name)} (known: {', '.join(self.names())})"
            )
        return entry
