"""behest's one exception tree. Each class maps to one gRPC status in `api/status.py`.

BehestError
├── InvalidArgument          bad request field (names the field)
├── NotFound                 unknown run, session, snapshot
├── AlreadyExists            client_request_id reused with a different request
├── FailedPrecondition       operation not valid in the current state
├── Aborted                  conflict with concurrent work (session busy)
├── OutOfRange               cursor past the end of a finished run
├── ResourceExhausted        a configured limit is reached
├── Unavailable              the server is shutting down
└── ProviderError            a model provider failed (carried into RunFailed)
    ├── TransientProviderError   retried: 429, 5xx, timeouts, resets
    ├── ContextOverflowError     the context did not fit the model
    └── PermanentProviderError   not retried: auth, bad request
"""

from __future__ import annotations


class BehestError(Exception):
    """Base of every error behest raises on purpose."""


class InvalidArgument(BehestError):
    pass


class NotFound(BehestError):
    pass


class AlreadyExists(BehestError):
    pass


class FailedPrecondition(BehestError):
    pass


class Aborted(BehestError):
    pass


class OutOfRange(BehestError):
    pass


class ResourceExhausted(BehestError):
    pass


class Unavailable(BehestError):
    pass


class ProviderError(BehestError):
    """A model call failed; `provider` names the provider."""

    def __init__(self, provider: str, message: str) -> None:
        super().__init__(f"provider {provider!r}: {message}")
        self.provider = provider


class TransientProviderError(ProviderError):
    """Worth retrying; `retry_after` is the server's hint in seconds, if any."""

    def __init__(self, provider: str, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(provider, message)
        self.retry_after = retry_after


class ContextOverflowError(ProviderError):
    pass


class PermanentProviderError(ProviderError):
    pass
