"""Configured providers by name (the ProviderId clients send)."""

from __future__ import annotations

from collections.abc import Iterable

from behest.errors import InvalidArgument
from behest.providers.base import Provider


class ProviderRegistry:
    """Looks providers up by name and checks the models they offer."""

    def __init__(self, providers: Iterable[Provider]) -> None:
        self._providers = {p.name: p for p in providers}

    def get(self, name: str) -> Provider:
        provider = self._providers.get(name)
        if provider is None:
            known = ", ".join(sorted(self._providers))
            raise InvalidArgument(f"provider: unknown provider {name!r} (known: {known})")
        return provider

    def check(self, name: str, model: str) -> None:
        """Raise InvalidArgument unless `name` is configured and offers `model`."""
        provider = self.get(name)
        check_model = getattr(provider, "check_model", None)
        if check_model is not None:
            check_model(model)
