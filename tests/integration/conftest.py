"""Integration fixtures: a real OpenAI-compatible model server (llama.cpp + SmolLM2-135M).

`llm_server` runs scripts/llm_server.py with `.venv-llm/bin/python` (created by
`make llm-install`) on a free 127.0.0.1 port, once per test session. Until `make llm-install`
has completed, the tests that use it are skipped, except under CI (env CI set), where that is
a failure.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LLM_VENV = ROOT / ".venv-llm"
LLM_PYTHON = LLM_VENV / "bin" / "python"
LLM_INSTALLED = LLM_VENV / ".installed"  # stamped by `make llm-install` once it all works
LLM_SERVER_SCRIPT = ROOT / "scripts" / "llm_server.py"
STARTUP_TIMEOUT_S = 45.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL (`http://127.0.0.1:PORT/v1`) of a running llama.cpp server; model `smollm2`."""
    if not LLM_INSTALLED.exists():
        reason = f"{LLM_INSTALLED.relative_to(ROOT)} is missing; run `make llm-install`"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {reason}", pytrace=False)
        pytest.skip(reason)
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    log_path = tmp_path_factory.mktemp("llm_server") / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(LLM_PYTHON), str(LLM_SERVER_SCRIPT), "--host", "127.0.0.1", "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not _answers(f"{base_url}/models"):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-3000:]
                pytest.fail(
                    f"llm server did not answer GET {base_url}/models "
                    f"(exit code {process.poll()}); log tail:\n{tail}",
                    pytrace=False,
                )
            time.sleep(0.2)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
