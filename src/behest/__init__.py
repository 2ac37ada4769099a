"""behest: durable LLM agent runs, streamed over gRPC.

`from behest import BehestClient` is the Python client (`behest.client`), imported only when
asked for, so that `import behest` stays cheap.
"""

from typing import TYPE_CHECKING, Any

# The one place the version is written (pyproject.toml reads it here): the newest
# "Added in behest X" of the contract's proto comments is never above it (tests say so).
__version__ = "0.11.0"
__all__ = ["BehestClient", "__version__"]

if TYPE_CHECKING:
    from behest.client import BehestClient


def __getattr__(name: str) -> Any:
    if name == "BehestClient":
        from behest.client import BehestClient

        return BehestClient
    raise AttributeError(f"module 'behest' has no attribute {name!r}")
