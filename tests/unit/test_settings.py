"""Settings are parsed strictly: a number that is not finite is refused, naming the setting."""

from __future__ import annotations

import pytest

from behest.config import Settings


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e309"])
def test_a_float_setting_must_be_finite(value: str) -> None:
    with pytest.raises(ValueError, match="setting 'run_lease_s': expected a finite number"):
        Settings().with_values({"run_lease_s": value}, source="environment")


def test_a_finite_float_setting_is_taken() -> None:
    assert Settings().with_values({"run_lease_s": "12.5"}, source="env").run_lease_s == 12.5
