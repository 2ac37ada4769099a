"""The client's one exception tree, mapped once from gRPC status codes (`error_of`).

    BehestError                 any failed call; `.code` (grpc.StatusCode), `.message`
     ├── NotFound               NOT_FOUND: no such run, session or call (for this caller)
     ├── InvalidArgument        INVALID_ARGUMENT: the request is wrong; the message says how
     ├── FailedPrecondition     FAILED_PRECONDITION: not now (a run ended, a call decided)
     ├── AlreadyExists          ALREADY_EXISTS
     ├── Unauthenticated        UNAUTHENTICATED: no token, or one the server does not know
     ├── PermissionDenied       PERMISSION_DENIED: known caller, not allowed
     ├── ResourceExhausted      RESOURCE_EXHAUSTED: a limit (streams, creations, disk)
     ├── Unavailable            UNAVAILABLE: the server is gone, after the client's retries
     ├── DeadlineExceeded       DEADLINE_EXCEEDED
     ├── OutOfRange             OUT_OF_RANGE
     ├── Aborted                ABORTED
     └── Internal               INTERNAL, UNKNOWN, DATA_LOSS: the server failed

Other codes (UNIMPLEMENTED, CANCELLED) raise the base class. This is the client's own tree:
the server's domain errors (`behest.errors`) are another, kept apart.
"""

from __future__ import annotations

import grpc
import grpc.aio


class BehestError(Exception):
    """A call the server (or the network) refused, with the status code and its message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code
        self.message = message


class NotFound(BehestError):
    """No such run, session or call, for this caller."""


class InvalidArgument(BehestError):
    """The request is not valid; the message names the field."""


class FailedPrecondition(BehestError):
    """The request does not fit the run's state now."""


class AlreadyExists(BehestError):
    """What the request would create exists already."""


class Unauthenticated(BehestError):
    """The server does not know who is calling."""


class PermissionDenied(BehestError):
    """The caller may not do this."""


class ResourceExhausted(BehestError):
    """A limit was reached: streams, creations per minute, a size, the disk."""


class Unavailable(BehestError):
    """The server could not be reached, or a stream could not be resumed."""


class DeadlineExceeded(BehestError):
    """The call took longer than its deadline."""


class OutOfRange(BehestError):
    """A position or page beyond what there is."""


class Aborted(BehestError):
    """The server gave up on the call midway; trying again may work."""


class Internal(BehestError):
    """The server failed; its logs say why (under the trace id it gave, if any)."""


_BY_CODE: dict[grpc.StatusCode, type[BehestError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRange,
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.INTERNAL: Internal,
    grpc.StatusCode.UNKNOWN: Internal,
    grpc.StatusCode.DATA_LOSS: Internal,
}


def error_of(exc: grpc.aio.AioRpcError) -> BehestError:
    """The client's exception for a failed call."""
    code = exc.code()
    return _BY_CODE.get(code, BehestError)(code, exc.details() or "")
