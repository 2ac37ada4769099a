"""Tools the model may call: a protocol, a registry, and the built-in set."""
