"""Every way a run fails maps to one FailureCode (runs/ending.py, the one table)."""

from __future__ import annotations

import pytest

from behest import errors
from behest.domain.spend import FailureCode
from behest.runs.ending import failure_code


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.RunStopped("doom loop", FailureCode.DOOM_LOOP), FailureCode.DOOM_LOOP),
        (errors.RateLimited("p", "429"), FailureCode.RATE_LIMITED),
        (errors.QuotaExhausted("p", "quota"), FailureCode.RATE_LIMITED),
        (errors.ProviderAuthError("p", "401"), FailureCode.AUTHENTICATION),
        (errors.ContextOverflowError("p", "too long"), FailureCode.CONTEXT_OVERFLOW),
        (errors.TransientProviderError("p", "503"), FailureCode.PROVIDER_UNAVAILABLE),
        (errors.PermanentProviderError("p", "400"), FailureCode.PROVIDER_ERROR),
        (errors.InvalidArgument("provider 'x' is not configured"), FailureCode.CONFIGURATION),
        (errors.Unavailable("?"), FailureCode.INTERNAL),
    ],
)
def test_each_error_has_its_failure_code(error: errors.BehestError, code: FailureCode) -> None:
    assert failure_code(error) == code
