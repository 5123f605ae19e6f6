"""The docs site, tested as a reader meets it: built, served on localhost, opened in headless Chromium.

Checks that pages render with their diagrams actually loaded (natural width > 0, light and dark variants),
that a diagram zooms when clicked, and that no request leaves localhost -- the site must work offline.
Screenshots land in .d2kit/artifacts/docs-site/ for a human to look at.
"""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO_ROOT / ".d2kit" / "artifacts" / "docs-site"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}

SAMPLE_SLUGS = [p.stem for p in sorted((REPO_ROOT / "docs" / "samples").glob("*.md")) if p.stem != "index"]


def _require_browser():
    if not CHROMIUM.exists():
        pytest.skip(f"!! BROWSER TEST SKIPPED: {CHROMIUM} not found. Install Debian's chromium "
                    "(`apt-get install -y chromium`, which .ci/run does) to test the site in a real browser.")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("!! BROWSER TEST SKIPPED: the playwright Python package is not installed "
                    "(pip install -e '.[dev]')")
    return sync_playwright


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        pass


@pytest.fixture(scope="module")
def site_url(built_site):
    sync_playwright = _require_browser()
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(built_site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield sync_playwright, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser(site_url):
    sync_playwright, _ = site_url
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def _open(browser, url: str, color_scheme: str = "light"):
    """A fresh page that records every URL it requests."""
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, color_scheme=color_scheme)
    page = context.new_page()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(url, wait_until="networkidle")
    return context, page, requested


def _diagram_images(page) -> list[dict]:
    return page.evaluate("""() => [...document.querySelectorAll('article img')]
        .filter(img => /assets\\/|reports\\//.test(img.getAttribute('src')))
        .map(img => ({src: img.getAttribute('src'), complete: img.complete, width: img.naturalWidth}))""")


def _external(requested: list[str]) -> list[str]:
    def local(url: str) -> bool:
        parsed = urlparse(url)
        return parsed.scheme in ("data", "blob", "about") or parsed.hostname in LOCAL_HOSTS
    return [url for url in requested if not local(url)]


@pytest.mark.parametrize("path, name, expects_diagrams", [
    ("/", "home", False),
    ("/reference-design/", "reference-design", True),
    ("/diagrams/", "diagrams", True),
    ("/drills/worker-partition/", "drill-worker-partition", False),
    ("/answer-key/", "answer-key", False),
    ("/load-tests/", "load-tests", False),
    ("/second-questions/", "second-questions", False),
    ("/calibration/", "calibration", False),
    ("/alternatives/", "alternatives", False),
    ("/cheatsheet/", "cheatsheet", False),
    ("/glossary/", "glossary", False),
    ("/measuring/", "measuring", False),
    ("/samples/", "samples", False),
    *((f"/samples/{slug}/", f"sample-{slug}", False) for slug in SAMPLE_SLUGS),
])
def test_page_renders_offline_with_its_diagrams(site_url, browser, path, name, expects_diagrams):
    _, base = site_url
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context, page, requested = _open(browser, base + path)
    try:
        assert page.locator("article h1").count() >= 1, f"{path} has no heading"
        images = _diagram_images(page)
        if expects_diagrams:
            assert images, f"{path} shows no diagram"
        broken = [img for img in images if not (img["complete"] and img["width"] > 0)]
        assert not broken, f"images that did not load on {path}: {broken}"
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    finally:
        context.close()
    assert not _external(requested), f"{path} requested outside localhost: {_external(requested)}"


def test_dark_palette_shows_the_dark_diagrams(site_url, browser):
    _, base = site_url
    context, page, requested = _open(browser, base + "/diagrams/", color_scheme="dark")
    try:
        visible = page.evaluate("""() => [...document.querySelectorAll('article img')]
            .filter(img => img.offsetParent !== null).map(img => img.getAttribute('src'))""")
        assert visible and all(".dark.svg" in src for src in visible if "diagrams/" in src), visible
        page.screenshot(path=str(ARTIFACTS / "diagrams-dark.png"), full_page=False)
    finally:
        context.close()
    assert not _external(requested)


def test_diagram_zooms_when_clicked(site_url, browser):
    _, base = site_url
    context, page, requested = _open(browser, base + "/diagrams/")
    try:
        page.locator("article a.glightbox").filter(has=page.locator("img:visible")).first.click()
        zoomed = page.locator(".gslide.current .gslide-image img")
        zoomed.wait_for(state="visible")
        assert zoomed.evaluate("img => img.naturalWidth") > 0
        # animations="disabled" fast-forwards the zoom-in, so the shot shows the opened picture.
        page.screenshot(path=str(ARTIFACTS / "diagram-zoomed.png"), animations="disabled")
    finally:
        context.close()
    assert not _external(requested)


def test_hidden_follow_ups_are_collapsed_until_opened(site_url, browser):
    _, base = site_url
    context, page, _ = _open(browser, base + "/follow-ups/")
    try:
        fold = page.locator("article details").first
        assert "45 minutes" in fold.locator("summary").inner_text()
        assert fold.get_attribute("open") is None, "the follow-ups must start folded"
        assert not page.get_by_text("partitions from the scheduler for ten").is_visible()
        fold.locator("summary").click()
        assert page.get_by_text("partitions from the scheduler for ten").is_visible()
    finally:
        context.close()
