"""Domain error → gRPC status code: one table, applied in one place (api/handlers.py)."""

from __future__ import annotations

import grpc

from behest import errors

STATUS_BY_ERROR: dict[type[errors.BehestError], grpc.StatusCode] = {
    errors.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    errors.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    errors.Aborted: grpc.StatusCode.ABORTED,
    errors.OutOfRange: grpc.StatusCode.OUT_OF_RANGE,
    errors.ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
    errors.DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    errors.ContextOverflowError: grpc.StatusCode.FAILED_PRECONDITION,
    errors.PermanentProviderError: grpc.StatusCode.FAILED_PRECONDITION,
    errors.TransientProviderError: grpc.StatusCode.UNAVAILABLE,
    errors.ProviderError: grpc.StatusCode.UNAVAILABLE,
}


def status_of(error: errors.BehestError) -> grpc.StatusCode:
    """The status code of a domain error (by its most specific class in the table)."""
    for cls in type(error).__mro__:
        code = STATUS_BY_ERROR.get(cls)  # type: ignore[call-overload]
        if code is not None:
            return code
    return grpc.StatusCode.INTERNAL
