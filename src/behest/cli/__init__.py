"""The `behest` command (`main`), over the public Python client (behest.client).

grpc-core writes its own log lines (a fork warning when an MCP server is spawned, a refused
TLS handshake, …) to stderr, outside behest's log and not JSON. Unless the environment sets
them (to something), the command turns them off before grpc is imported: GRPC_VERBOSITY=NONE,
and fork support off (GRPC_ENABLE_FORK_SUPPORT=false: behest forks only to exec another
program, where gRPC has nothing to carry over). docs/OPERATIONS.md, "Logs".
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from behest.cli.entry import EXIT_ERROR, build_parser

__all__ = ["EXIT_ERROR", "GRPC_CORE", "build_parser", "main"]

# grpc-core's settings the command defaults, read by grpc when it is imported.
GRPC_CORE = {"GRPC_VERBOSITY": "NONE", "GRPC_ENABLE_FORK_SUPPORT": "false"}


def main(argv: Sequence[str] | None = None) -> int:
    """The `behest` command; returns its exit code."""
    for name, value in GRPC_CORE.items():
        if not os.environ.get(name):
            os.environ[name] = value
    from behest.cli.entry import main as run  # imports grpc

    return run(argv)


def __getattr__(name: str) -> Any:
    if name in ("EXIT_ERROR", "build_parser"):
        from behest.cli import entry

        return getattr(entry, name)
    raise AttributeError(f"module 'behest.cli' has no attribute {name!r}")
