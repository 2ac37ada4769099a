"""The TypeScript client's browser bundle in headless Chromium (issue 26): a page served from
another loopback origin than the server's streams a run over the Connect protocol and
gRPC-Web, through CORS for the origins in `http_cors_origins`; an origin not in them is
refused by the browser, and a page without a token gets UNAUTHENTICATED."""

from __future__ import annotations

import shutil
import threading
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support import start_server, stop_server
from tests.typescript_support import BUNDLE
from tests.typescript_support import typescript_client as typescript_client  # a fixture
from tests.web_support import ALICE, chromium, expect, inspector_settings, screenshot

TIMEOUT_MS = 20_000
# The first test of a session also builds the client (tests/typescript_support.py).
pytestmark = pytest.mark.timeout(180)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def static_site(root: Path) -> Iterator[str]:
    """The page and the client's bundle, served from `root` on 127.0.0.1; yields its origin."""
    page = Path(__file__).resolve().parents[2] / "clients/typescript/test/browser/index.html"
    shutil.copy(page, root / "index.html")
    shutil.copy(BUNDLE, root / "behest.js")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@asynccontextmanager
async def behest_allowing(data_dir: Path, origin: str) -> AsyncIterator[str]:
    """A server whose HTTP listener allows `origin` (CORS); yields the listener's URL."""
    server = await start_server(inspector_settings(data_dir, http_cors_origins=[origin]))
    try:
        assert server.app.web is not None
        yield f"http://127.0.0.1:{server.app.web.port}"
    finally:
        await stop_server(server)


def page_url(site: str, **params: str) -> str:
    return f"{site}/index.html#{urllib.parse.urlencode(params)}"


@pytest.fixture
def sites(typescript_client: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two origins serving the page: the first allowed by the server, the second not."""
    (tmp_path / "allowed").mkdir()
    (tmp_path / "other").mkdir()
    with static_site(tmp_path / "allowed") as allowed, static_site(tmp_path / "other") as other:
        yield allowed, other


@pytest.mark.parametrize("protocol", ["connect", "grpc-web"])
async def test_a_page_of_another_origin_streams_a_run(
    sites: tuple[str, str], tmp_path: Path, protocol: str
) -> None:
    allowed, _ = sites
    text = f"hello from a browser over {protocol}"
    async with behest_allowing(tmp_path / "data", allowed) as server, chromium() as browser:
        page = await browser.new_page()
        url = page_url(allowed, server=server, token=ALICE, protocol=protocol, input=text)
        await page.goto(url)
        status = page.locator("#status")
        await expect(status).to_contain_text("runCompleted after", timeout=TIMEOUT_MS)
        await expect(page.locator("#text")).to_have_text(text)
        await expect(page.locator("#run")).to_contain_text("COMPLETED")
        await screenshot(page, f"typescript-client-{protocol}")


async def test_a_page_without_a_token_is_unauthenticated(
    sites: tuple[str, str], tmp_path: Path
) -> None:
    allowed, _ = sites
    async with behest_allowing(tmp_path / "data", allowed) as server, chromium() as browser:
        page = await browser.new_page()
        await page.goto(page_url(allowed, server=server, protocol="connect"))
        await expect(page.locator("#status")).to_contain_text(
            "error Unauthenticated", timeout=TIMEOUT_MS
        )


async def test_an_origin_not_allowed_is_refused_by_the_browser(
    sites: tuple[str, str], tmp_path: Path
) -> None:
    allowed, other = sites
    async with behest_allowing(tmp_path / "data", allowed) as server, chromium() as browser:
        page = await browser.new_page()
        blocked: list[str] = []
        page.on("console", lambda message: blocked.append(message.text))
        await page.goto(page_url(other, server=server, token=ALICE, attempts="0"))
        # A browser hides why a cross-origin request failed from the page: a network error,
        # which the client would retry; with no attempts left it gives up as UNAVAILABLE.
        await expect(page.locator("#status")).to_contain_text(
            "error Unavailable", timeout=TIMEOUT_MS
        )
        assert any("CORS" in line for line in blocked), blocked
