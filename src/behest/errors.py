"""behest's one exception tree. Each class maps to one gRPC status in `api/status.py`.

BehestError
├── Unauthenticated          missing, bad or expired credentials
├── PermissionDenied         a known caller without the role an operation needs
├── InvalidArgument          bad request field (names the field)
├── NotFound                 unknown run, session, snapshot
├── AlreadyExists            client_request_id reused with a different request
├── FailedPrecondition       operation not valid in the current state
│   └── RunStopped               a run cannot go on; its FailureCode says why
├── Aborted                  conflict with concurrent work (session busy)
│   └── Fenced                   a write of a run whose claim this node lost
├── OutOfRange               cursor past the end of a finished run
├── ResourceExhausted        a configured limit is reached
│   └── StorageFull              the database's disk is full (also a StorageFault)
├── Unavailable              the server is shutting down
│   ├── StorageLocked            another writer holds the database (also a StorageFault)
│   └── StorageFailed            the database failed a write otherwise (also a StorageFault)
├── DeadlineExceeded         an answer behest waits for did not come in time
└── ProviderError            a model provider failed (carried into RunFailed)
    ├── TransientProviderError   retried: 429, 5xx, timeouts, resets
    │   └── RateLimited              429, or a spent quota
    ├── ContextOverflowError     the context did not fit the model
    └── PermanentProviderError   not retried: bad request
        ├── ProviderAuthError        the provider refused behest's credentials
        └── QuotaExhausted           the provider's quota or spend limit is used up
"""

from __future__ import annotations

from behest.domain.spend import FailureCode


class BehestError(Exception):
    """Base of every error behest raises on purpose."""


class Unauthenticated(BehestError):
    pass


class PermissionDenied(BehestError):
    pass


class InvalidArgument(BehestError):
    pass


class NotFound(BehestError):
    pass


class AlreadyExists(BehestError):
    pass


class FailedPrecondition(BehestError):
    pass


class RunStopped(FailedPrecondition):
    """A run cannot go on (max iterations, a doom loop, a budget…); `code` says why."""

    def __init__(self, message: str, code: FailureCode) -> None:
        super().__init__(message)
        self.code = code


class Aborted(BehestError):
    pass


class Fenced(Aborted):
    """A run's step was refused: another node claimed the run since this one did (its lease
    generation moved on). Nothing of the step was written; this node stops the run."""

    def __init__(self, run_id: str, generation: int) -> None:
        super().__init__(
            f"run {run_id} was taken over by another node (this node's claim {generation} "
            "is no longer current); nothing more is written by this node"
        )
        self.run_id = run_id
        self.generation = generation


class OutOfRange(BehestError):
    pass


class ResourceExhausted(BehestError):
    pass


class Unavailable(BehestError):
    pass


class DeadlineExceeded(BehestError):
    pass


class StorageFault(BehestError):
    """A write the database did not take, in plain words (store/sql/faults.py `fault_of`);
    a run it stops fails with FailureCode.STORAGE. Mixed into the classes below, whose
    first base gives the status."""

    def refused(self, what: str) -> StorageFault:
        """The same fault, saying what was not done (e.g. "no run was created")."""
        return type(self)(f"{what}: {self}")


class StorageFull(ResourceExhausted, StorageFault):
    pass


class StorageLocked(Unavailable, StorageFault):
    pass


class StorageFailed(Unavailable, StorageFault):
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


class RateLimited(TransientProviderError):
    pass


class ContextOverflowError(ProviderError):
    pass


class PermanentProviderError(ProviderError):
    pass


class ProviderAuthError(PermanentProviderError):
    pass


class QuotaExhausted(PermanentProviderError):
    pass


def quote(value: str, limit: int = 80) -> str:
    """A client's value as it goes into an error message: quoted, and cut at `limit` chars
    (a status's message travels in a header, which gRPC bounds)."""
    return repr(value if len(value) <= limit else value[: limit - 1] + "…")


def describe(exc: BaseException) -> str:
    """One line of plain words for an exception from outside behest's tree: its message,
    never its class name (clients and models read this; the log keeps the traceback)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    if isinstance(exc, KeyError) and exc.args:
        return f"missing key {exc.args[0]!r}"
    text = " ".join(str(exc).split())
    if text:
        return text
    for kind, words in _PLAIN_WORDS:
        if isinstance(exc, kind):
            return words
    return "an unexpected failure (no detail given)"


_PLAIN_WORDS: tuple[tuple[type[BaseException], str], ...] = (
    (TimeoutError, "timed out"),
    (ConnectionError, "the connection failed"),
    (EOFError, "the connection closed early"),
    (RecursionError, "the data is nested too deep"),
    (MemoryError, "out of memory"),
)
