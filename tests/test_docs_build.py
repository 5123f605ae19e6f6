"""The docs site builds strictly, has every page with real content, loads nothing from the internet,
and its diagrams are fresh exports of their sources (which are what draw.py generates from scale.yaml)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse

import pytest

from d2kit.site import diagrams

REPO_ROOT = Path(__file__).resolve().parent.parent

PAGES = [
    "index.html", "prompt/index.html", "clarifying/index.html", "template/index.html",
    "time-budget/index.html", "follow-ups/index.html", "reference-design/index.html", "diagrams/index.html",
    "answer-key/index.html", "rubric/index.html", "load-tests/index.html", "schema/index.html",
    "code/index.html", "drills/index.html", "second-questions/index.html", "calibration/index.html",
    "alternatives/index.html", "cheatsheet/index.html", "glossary/index.html", "measuring/index.html",
    "samples/index.html", *(f"samples/{page.stem}/index.html" for page in (REPO_ROOT / "docs" / "samples").glob("*.md")
                            if page.stem != "index"),
    *(f"drills/{name}/index.html" for name in (
        "worker-partition", "replica-double-fire", "catch-up-storm", "noisy-tenant", "proof-of-execution",
        "postgres-limits", "clock-skew", "scheduler-crash", "scheduler-paused", "hung-handler",
        "postgres-restart")),
]


class _Resources(HTMLParser):
    """URLs a page makes the browser fetch (not plain links a reader may choose to follow)."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self.text: list[str] = []
        self._in_article = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("script", "img", "iframe", "source", "video", "audio", "embed") and attrs.get("src"):
            self.urls.append(attrs["src"])
        if tag == "link" and attrs.get("href") and attrs.get("rel") not in ("canonical", "alternate"):
            self.urls.append(attrs["href"])
        if tag == "article":
            self._in_article += 1

    def handle_endtag(self, tag):
        if tag == "article":
            self._in_article -= 1

    def handle_data(self, data):
        if self._in_article:
            self.text.append(data)


def _parse(path: Path) -> _Resources:
    parser = _Resources()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def _remote(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.scheme in ("http", "https") or url.startswith("//")


def test_every_page_exists_with_real_content(built_site):
    thin = {}
    for page in PAGES:
        path = built_site / page
        assert path.exists(), f"page missing: {page}"
        words = len(" ".join(_parse(path).text).split())
        if words < 150:
            thin[page] = words
    assert not thin, f"pages with almost no content (words): {thin}"


def test_no_page_or_stylesheet_fetches_from_the_internet(built_site):
    remote = {}
    for html in built_site.rglob("*.html"):
        urls = [u for u in _parse(html).urls if _remote(u)]
        if urls:
            remote[str(html.relative_to(built_site))] = urls
    for css in built_site.rglob("*.css"):
        text = css.read_text(encoding="utf-8")
        urls = [u for u in re.findall(r"url\(\s*['\"]?([^'\")]+)", text) if _remote(u)]
        urls += re.findall(r"@import\s+['\"](https?://[^'\"]+)", text)
        if urls:
            remote[str(css.relative_to(built_site))] = urls
    assert not remote, f"resources fetched from outside the site: {remote}"


def test_diagram_svgs_embed_their_fonts(built_site):
    for svg in (built_site / "assets" / "diagrams").glob("*.svg"):
        text = svg.read_text(encoding="utf-8")
        assert not re.search(r"url\(\s*['\"]?https?:", text), f"{svg.name} loads a font or image from the web"


def test_reference_design_and_rubric_are_rendered(built_site):
    design = " ".join(_parse(built_site / "reference-design" / "index.html").text)
    for section in ("1. Requirements and scope", "6. Deep dive", "9. Tradeoffs I explicitly rejected"):
        assert section in design
    rubric = " ".join(_parse(built_site / "rubric" / "index.html").text)
    assert "Identified the right hard parts" in rubric, "the rubric page is not rendered from rubric/*.yaml"


def test_diagram_exports_are_fresh():
    if not diagrams.exporter_available():
        pytest.skip(f"!! DIAGRAM FRESHNESS NOT CHECKED: {diagrams.EXPORTER_MISSING}")
    assert diagrams.stale_exports() == [], "run `make diagrams`"


def test_diagram_sources_are_what_draw_py_generates(monkeypatch):
    """The diagrams quote figures from scale.yaml (process counts, lease, heartbeat); regenerate them when
    it changes: `.venv/bin/python designs/d2/diagrams/draw.py && make diagrams`."""
    spec = importlib.util.spec_from_file_location("d2_draw", diagrams.DIAGRAM_DIR / "draw.py")
    draw = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, draw)  # dataclasses look their module up while being created
    spec.loader.exec_module(draw)
    from d2kit import capacity

    scale = capacity.load_scale()
    cap = capacity.derive(scale)
    for make in (draw.architecture, draw.lease_fencing, draw.catch_up, draw.tenant_pools):
        scene = make(scale, cap)
        source = diagrams.DIAGRAM_DIR / f"{scene.name}.excalidraw"
        committed = json.loads(source.read_text(encoding="utf-8"))
        assert committed["elements"] == json.loads(json.dumps(scene.elements)), f"{source.name} is stale"


def test_a_candidates_drawing_exports_with_one_command(tmp_path):
    if not diagrams.exporter_available():
        pytest.skip(f"!! DIAGRAM EXPORT NOT TESTED: {diagrams.EXPORTER_MISSING}")
    from typer.testing import CliRunner

    drawing = tmp_path / "attempt-d2.excalidraw"
    drawing.write_bytes((diagrams.DIAGRAM_DIR / "tenant-pools.excalidraw").read_bytes())
    result = CliRunner().invoke(diagrams.app, ["export", str(drawing), "--format", "png"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "attempt-d2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "attempt-d2.svg").exists()


CHROMIUM = Path("/usr/bin/chromium")


def test_cheat_sheet_prints_on_one_a4_page(built_site, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip(f"!! CHEAT SHEET PRINT NOT TESTED: {CHROMIUM} not found (apt-get install -y chromium)")
    pdf = tmp_path / "cheatsheet.pdf"
    subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
                    "--no-pdf-header-footer", f"--print-to-pdf={pdf}",
                    (built_site / "cheatsheet" / "index.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    pages = re.findall(rb"/Type\s*/Page(?![s\w])", pdf.read_bytes())
    assert len(pages) == 1, f"the cheat sheet prints on {len(pages)} pages"


def test_glossary_links_land_on_an_entry(built_site):
    glossary_html = (built_site / "glossary" / "index.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'id="([^"]+)"', glossary_html))
    targets = set()
    for html in built_site.rglob("*.html"):
        targets |= set(re.findall(r'class="glossary-term" href="[^"#]*#([^"]+)"', html.read_text(encoding="utf-8")))
    assert targets, "no page links a term to the glossary"
    assert targets <= anchors, f"glossary links without an entry: {targets - anchors}"
    design = (built_site / "reference-design" / "index.html").read_text(encoding="utf-8")
    assert 'href="../glossary/#fencing-token"' in design


def test_home_page_links_every_teaching_page(built_site):
    home = (built_site / "index.html").read_text(encoding="utf-8")
    for page in ("second-questions/", "calibration/", "alternatives/", "cheatsheet/", "glossary/", "measuring/",
                 "samples/"):
        assert f'href="{page}"' in home, f"the home page does not link {page}"
