"""`behest worker run`'s loading of a module's Worker, and where its address, token and TLS
come from (the option, else the Worker's own, else the environment); the command run in a
child process is tests/e2e/test_worker_sdk.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from behest.cli import build_parser, entry
from behest.cli import worker as worker_cli
from behest.cli.waits import UsageError
from behest.worker import Worker
from tests.unit.test_layers import graph


def test_the_cli_uses_only_the_public_names_of_the_worker_sdk() -> None:
    for module, targets in graph().items():
        if module.startswith("behest.cli"):
            assert not {t for t in targets if t.startswith("behest.worker._")}, module


def test_the_cli_loads_a_modules_worker_and_keeps_its_own_settings_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_tools.py").write_text(
        "from behest.worker import Worker\n"
        "worker = Worker('10.0.0.7:50051', token='own')\n"
        "not_a_worker = 3\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # load() puts the directory first
    monkeypatch.setitem(sys.modules, "my_tools", None)
    del sys.modules["my_tools"]  # gone again when the test ends
    monkeypatch.setenv("BEHEST_TOKEN", "from-env")
    loaded = worker_cli.load("my_tools:worker")
    assert loaded.address == "10.0.0.7:50051"
    args = build_parser().parse_args(["worker", "run", "my_tools:worker"])
    worker_cli._configure(loaded, args)
    assert loaded.address == "10.0.0.7:50051"
    assert loaded._call_metadata() == (("authorization", "Bearer own"),)
    args = build_parser().parse_args(
        ["worker", "run", "my_tools:worker", "--address", "127.0.0.1:7", "--token", "given"]
    )
    worker_cli._configure(loaded, args)
    assert loaded.address == "127.0.0.1:7"
    assert loaded._call_metadata() == (("authorization", "Bearer given"),)
    for target, words in [
        ("my_tools", "MODULE:ATTRIBUTE"),
        ("no_such_module_here:worker", "cannot import no_such_module_here"),
        ("my_tools:missing", "my_tools has no missing"),
        ("my_tools:not_a_worker", "is a int, not a behest.worker.Worker"),
    ]:
        with pytest.raises(UsageError, match=words):
            worker_cli.load(target)


def test_a_worker_without_a_token_of_its_own_takes_the_environments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BEHEST_TOKEN", "from-env")
    worker = Worker("127.0.0.1:1")
    worker_cli._configure(worker, build_parser().parse_args(["worker", "run", "m:w"]))
    assert worker._call_metadata() == (("authorization", "Bearer from-env"),)
    assert worker.sends_token and not worker.uses_tls


def test_tls_files_given_replace_the_workers_and_a_missing_one_is_refused(
    tmp_path: Path,
) -> None:
    worker = Worker("127.0.0.1:1")
    args = build_parser().parse_args(
        ["worker", "run", "m:w", "--tls-ca", str(tmp_path / "missing.pem")]
    )
    with pytest.raises(UsageError, match="cannot read the TLS CA file"):
        worker_cli._configure(worker, args)
    (tmp_path / "ca.pem").write_text("not checked until the channel is made")
    args = build_parser().parse_args(["worker", "run", "m:w", "--tls-ca", str(tmp_path / "ca.pem")])
    worker_cli._configure(worker, args)
    assert worker.uses_tls


def test_a_token_without_tls_to_another_machine_is_warned_of(
    capsys: pytest.CaptureFixture[str],
) -> None:
    check = entry._warn_if_plaintext  # what `behest worker run` is given
    for address, sends_token, uses_tls, warned in [
        ("10.1.2.3:50051", True, False, True),
        ("127.0.0.1:50051", True, False, False),
        ("10.1.2.3:50051", False, False, False),
        ("10.1.2.3:50051", True, True, False),
    ]:
        check(address, sends_token, uses_tls)
        assert ("warning: the token goes to" in capsys.readouterr().err) is warned, address
