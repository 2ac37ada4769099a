"""`behest token new`: a random token printed once, and the settings table with its SHA-256
that a real server then accepts it by; and the CLI never showing a token it was given."""

from __future__ import annotations

import hashlib
import re
import secrets
import tomllib
from pathlib import Path
from typing import Any

import grpc
import pytest

from behest.cli import build_parser, main
from behest.client import BehestClient, RunCompleted, Unauthenticated
from behest.config import Settings
from tests.support import start_server, stop_server


def token_new(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str, dict[str, Any]]:
    """Run `behest token new`; its token, what it printed, and the TOML table it printed."""
    assert main(["token", "new", *args]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    token = captured.out.splitlines()[0]
    table = captured.out[captured.out.index("[auth.tokens.") :]
    return token, captured.out, tomllib.loads(table)


def test_token_new_prints_a_token_and_the_table_with_its_sha256(
    capsys: pytest.CaptureFixture[str],
) -> None:
    token, out, parsed = token_new(capsys, "--tenant", "acme", "--principal", "alice")
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)  # secrets.token_urlsafe(32)
    assert parsed == {
        "auth": {
            "tokens": {
                "alice": {
                    "sha256": hashlib.sha256(token.encode()).hexdigest(),
                    "principal": "alice",
                    "tenant": "acme",
                }
            }
        }
    }
    assert "shown once" in out
    assert "Only its SHA-256" in out
    assert out.count(token) == 1  # the table holds the hash only

    again, _, _ = token_new(capsys, "--tenant", "acme", "--principal", "alice")
    assert again != token


def test_names_that_are_not_bare_toml_keys_are_quoted(capsys: pytest.CaptureFixture[str]) -> None:
    principal, tenant = 'svc.ci "deploy" \\ bot', "team\tä\x7f"
    token, _, parsed = token_new(capsys, "--tenant", tenant, "--principal", principal)
    entry = parsed["auth"]["tokens"][principal]
    assert entry["principal"] == principal and entry["tenant"] == tenant
    assert entry["sha256"] == hashlib.sha256(token.encode()).hexdigest()


def test_an_empty_principal_or_tenant_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "new", "--tenant", " ", "--principal", "alice"]) == 2
    assert capsys.readouterr().err == "error: --principal and --tenant must not be empty\n"
    with pytest.raises(SystemExit) as exit_:
        main(["token", "new", "--principal", "alice"])
    assert exit_.value.code == 2
    assert "--tenant" in capsys.readouterr().err


async def test_a_server_with_the_printed_table_accepts_the_token(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    token, out, _ = token_new(capsys, "--tenant", "acme", "--principal", "alice")
    # The settings file as the printed text says: [auth] mode = "bearer", then the table.
    config = tmp_path / "behest.toml"
    config.write_text('[auth]\nmode = "bearer"\n\n' + out[out.index("[auth.tokens.") :])
    settings = Settings.load(
        config_file=str(config),
        listen="127.0.0.1:0",
        data_dir=str(tmp_path / "data"),
        log_format="text",
        shutdown_grace_s=0.0,
    )
    assert settings.auth.mode == "bearer"
    server = await start_server(settings)
    try:
        async with BehestClient(server.address, token=token) as client:
            events = [e async for e in client.stream_run("hello with a token")]
            assert events[-1].terminal and isinstance(events[-1].data, RunCompleted)
            assert [r.id for r in await client.list_runs()] == [events[0].run_id]
        wrong = secrets.token_urlsafe(32)
        for other in (wrong, ""):
            async with BehestClient(server.address, token=other) as client:
                with pytest.raises(Unauthenticated) as refused:
                    await client.list_runs()
            assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
            assert token not in str(refused.value)
            assert not other or other not in str(refused.value)
    finally:
        await stop_server(server)


# --- a token given to the CLI is never shown ----------------------------------------------


def test_usage_errors_and_help_do_not_show_a_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = secrets.token_urlsafe(32)
    for argv in (
        [f"--token={secret}", "runs", "list"],  # the token taken for the command
        ["runs", "list", f"--token={secret}", "--limit", "x"],
        ["runs", "list", "--tok", secret, "--status", secret],
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "error:" in err and secret not in err
    # …nor the help, whatever $BEHEST_TOKEN holds.
    monkeypatch.setenv("BEHEST_TOKEN", secret)
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "$BEHEST_TOKEN" in out and secret not in out


def test_a_token_grpc_cannot_send_is_refused_without_showing_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = "s3cr3t-" + secrets.token_hex(8) + "\u00e9"
    assert main(["runs", "list", "--server", "127.0.0.1:1", f"--token={secret}"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "error: the token must be visible ASCII characters, without spaces\n"
    assert secret[:20] not in captured.out + captured.err


def test_an_unreadable_tls_file_is_an_error_naming_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.crt"
    assert main(["runs", "list", "--tls-ca", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot read the TLS CA file {missing}: ")
    assert main(["runs", "list", "--tls-ca", str(missing), "--tls-cert", str(missing)]) == 2
    assert "go together" in capsys.readouterr().err


def test_a_token_sent_without_tls_off_loopback_is_warned_about(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from behest.cli.entry import _client

    secret = secrets.token_urlsafe(32)
    for address, warned in [
        ("127.0.0.1:50051", False),
        ("localhost:50051", False),
        ("[::1]:50051", False),
        ("dns:///localhost:50051", False),
        ("unix:/tmp/behest.sock", False),
        ("behest.example.com:50051", True),
        ("10.1.2.3:50051", True),
    ]:
        args = build_parser().parse_args(["runs", "list", "--server", address, f"--token={secret}"])
        _client(args)
        err = capsys.readouterr().err
        assert ("warning: the token goes to" in err) is warned, address
        assert secret not in err
