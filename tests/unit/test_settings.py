"""Settings are typed and checked at start-up: a bad one names the setting and its value."""

from __future__ import annotations

from pathlib import Path

import pytest

from behest.config import Settings


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e309"])
def test_a_float_setting_must_be_finite(value: str) -> None:
    with pytest.raises(ValueError, match=r"environment: setting 'run_lease_s': .*finite") as err:
        Settings().with_values({"run_lease_s": value}, source="environment")
    assert repr(value) in str(err.value)


def test_a_finite_float_setting_is_taken() -> None:
    assert Settings().with_values({"run_lease_s": "12.5"}, source="env").run_lease_s == 12.5


def test_an_unknown_setting_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="setting 'run_leas_s': Extra inputs are not permitted"):
        Settings().with_values({"run_leas_s": 3}, source="tests")


def test_file_then_environment_then_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "behest.toml"
    config.write_text('max_iterations = 3\nrun_lease_s = 9\nlisten = "127.0.0.1:1"\n')
    monkeypatch.setenv("BEHEST_RUN_LEASE_S", "7")
    settings = Settings.load(config_file=str(config), listen="127.0.0.1:2")
    assert (settings.max_iterations, settings.run_lease_s, settings.listen) == (
        3,
        7.0,
        "127.0.0.1:2",
    )


def test_keys_under_a_behest_table_count_as_top_level(tmp_path: Path) -> None:
    config = tmp_path / "behest.toml"
    config.write_text("[behest]\nmax_iterations = 4\n")
    assert Settings.load(config_file=str(config)).max_iterations == 4


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[providers.p]\ntype = "nope"\n', "setting 'providers.p.type': must be one of"),
        ("[mcp]\nother = 1\n", "setting 'mcp.other': Extra inputs are not permitted"),
    ],
)
def test_a_bad_table_names_its_key(tmp_path: Path, text: str, problem: str) -> None:
    config = tmp_path / "behest.toml"
    config.write_text(text)
    with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace(".", r"\.")):
        Settings.load(config_file=str(config))
