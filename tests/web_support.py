"""Support for the run inspector's tests: a real server with its HTTP side and bearer tokens
of two tenants, headless Chromium (Debian's, through Playwright), screenshots, plain HTTP.

Screenshots go to <repo>/test-output/inspector/ (gitignored), one PNG per page a test saw.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from behest.config import Settings
from tests.support import CI, Server, fast_settings, start_server, stop_server

CHROMIUM = os.environ.get("BEHEST_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[1] / "test-output" / "inspector"

# Bearer tokens of two tenants; alice may decide approvals, carol (of alice's tenant) not.
ALICE = "alice-inspector-token-0123456789"
BOB = "bob-inspector-token-9876543210"
CAROL = "carol-inspector-token-5555555555"


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


AUTH = {
    "auth": {
        "mode": "bearer",
        "approver_role": "approver",
        "tokens": {
            "alice": {
                "sha256": _sha(ALICE),
                "principal": "alice",
                "tenant": "acme",
                "roles": ["approver"],
            },
            "bob": {"sha256": _sha(BOB), "principal": "bob", "tenant": "globex"},
            "carol": {"sha256": _sha(CAROL), "principal": "carol", "tenant": "acme"},
        },
    }
}


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def inspector_settings(data_dir: Path, **overrides: object) -> Settings:
    settings = fast_settings(data_dir, http_listen="127.0.0.1:0", **overrides)
    return settings.with_tables(AUTH, source="tests")


@dataclass
class Inspector:
    server: Server

    @property
    def base(self) -> str:
        web = self.server.app.web
        assert web is not None
        return f"{web.scheme}://127.0.0.1:{web.port}"


@asynccontextmanager
async def inspector(data_dir: Path, **overrides: object) -> AsyncIterator[Inspector]:
    server = await start_server(inspector_settings(data_dir, **overrides))
    try:
        yield Inspector(server)
    finally:
        await stop_server(server)


def chromium_or_skip() -> str:
    """Debian's chromium; missing: a failure under CI (BEHEST_CI), else a skip."""
    try:
        import playwright  # noqa: F401
    except ImportError:
        missing = "the playwright package is not installed (make install)"
    else:
        missing = "" if Path(CHROMIUM).exists() else f"{CHROMIUM} is missing (make install)"
    if missing:
        if CI:
            pytest.fail(f"browser tests need Chromium: {missing}", pytrace=False)
        pytest.skip(missing)
    return CHROMIUM


@asynccontextmanager
async def chromium() -> AsyncIterator[Any]:
    """A headless Chromium browser (Playwright's async API)."""
    executable = chromium_or_skip()
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=executable, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield browser
        finally:
            await browser.close()


async def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path


async def signed_in(browser: Any, base: str, token: str) -> Any:
    """A new page of a new browser context, signed in with `token` through the form."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    await page.goto(f"{base}/signin")
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base}/runs")
    return page


# --- plain HTTP (no browser) ---------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: str
    cookies: list[str]

    def cookie(self, name: str) -> str:
        for header in self.cookies:
            if header.startswith(f"{name}="):
                return header.split(";")[0].split("=", 1)[1]
        raise AssertionError(f"no cookie {name} set: {self.cookies}")

    def csrf(self) -> str:
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', self.body)
        assert found, "the page has no CSRF field"
        return found.group(1)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _fetch(
    url: str,
    cookies: dict[str, str],
    form: dict[str, str] | None,
    headers: dict[str, str],
    context: ssl.SSLContext | None,
) -> Reply:
    sent = dict(headers)
    if cookies:
        sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    handlers: list[Any] = [_NoRedirects()]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    try:
        response = opener.open(urllib.request.Request(url, data=data, headers=sent), timeout=20)
    except urllib.error.HTTPError as error:
        response = error
    return Reply(
        response.status,
        {k.lower(): v for k, v in response.headers.items()},
        response.read().decode(),
        response.headers.get_all("set-cookie") or [],
    )


async def fetch(
    url: str,
    *,
    cookies: dict[str, str] | None = None,
    form: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> Reply:
    """GET (or POST a form to) `url` without following redirects."""
    return await asyncio.to_thread(_fetch, url, cookies or {}, form, headers or {}, context)


async def session_cookie(base: str, token: str) -> dict[str, str]:
    """Sign in over plain HTTP; the cookies a browser would then send."""
    form = await fetch(f"{base}/signin")
    nonce = {"behest_signin": form.cookie("behest_signin")}
    reply = await fetch(f"{base}/signin", cookies=nonce, form={"csrf": form.csrf(), "token": token})
    assert reply.status == 303, reply.body
    return {"behest_session": reply.cookie("behest_session")}


def expect(target: Any) -> Any:
    """Playwright's `expect` (imported late: without Playwright the tests skip or fail first)."""
    from playwright.async_api import expect as playwright_expect

    return playwright_expect(target)
