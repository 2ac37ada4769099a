"""behest: durable LLM agent runs, streamed over gRPC."""

__version__ = "0.4.0"
