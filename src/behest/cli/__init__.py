"""The `behest` command (`main`), over the public Python client (behest.client)."""

from behest.cli.entry import EXIT_ERROR, build_parser, main

__all__ = ["EXIT_ERROR", "build_parser", "main"]
