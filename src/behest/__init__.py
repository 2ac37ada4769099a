"""behest: durable LLM agent runs, streamed over gRPC.

`from behest import BehestClient` is the Python client (`behest.client`), imported only when
asked for, so that `import behest` stays cheap.
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.4.0"
__all__ = ["BehestClient", "__version__"]

if TYPE_CHECKING:
    from behest.client import BehestClient


def __getattr__(name: str) -> Any:
    if name == "BehestClient":
        from behest.client import BehestClient

        return BehestClient
    raise AttributeError(f"module 'behest' has no attribute {name!r}")
