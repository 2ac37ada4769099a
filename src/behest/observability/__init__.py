"""Traces, metrics, the /metrics endpoint and log lines: how behest is observed."""
