"""``d2kit diagram``: export Excalidraw drawings to SVG and PNG with real Excalidraw rendering.

The exporter is the npm package ``@swiftlysingh/excalidraw-cli`` pinned by the repo's package-lock.json
(``npm ci`` installs it; ``make`` does that when npm is present). Its SVG is what Excalidraw's own
``exportToSvg`` produces, with the fonts embedded, so the pictures work offline.

Staleness check: the exporter's output is byte-for-byte deterministic for a given source and exporter
version (the lockfile pins both), so ``check`` re-exports into a temporary directory and compares bytes.
That catches an edited source whose exports were not regenerated *and* a hand-edited export, which a
recorded source hash would miss.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import typer

from d2kit import paths
from d2kit.scoring.scene import SceneError, live_elements

REPO_ROOT = paths.ROOT
DIAGRAM_DIR = paths.DIAGRAM_DIR
EXPORTER_BIN = paths.NODE_BIN / "excalidraw-cli"
PNG_SCALE = "2"  # crisp on high-density screens and when zoomed

app = typer.Typer(help="Export Excalidraw drawings (yours or the reference diagrams) to SVG/PNG.",
                  no_args_is_help=True)


# What a missing exporter is told as: the export's error and the tests' skip reasons.
EXPORTER_MISSING = ("the Excalidraw exporter is not installed: run `npm ci` in the repo root "
                    "(needs Node >= 20.19 and npm)")


class ExporterMissing(RuntimeError):
    pass


class NothingToExport(RuntimeError):
    pass


FRAME_TYPES = ("frame", "magicframe")
FRAME_NAME_SIZE = 16  # px; the name goes inside the box's top-left corner, so the export keeps the scene's size


def exportable_scene(raw: object, source: str) -> dict:
    """The scene as the exporter can draw it: live elements only, frames as labelled rectangles.

    The exporter sizes the image to every element, deleted ones included, and it measures a frame's name on
    a canvas it does not have (``getContext()`` returns null under jsdom, and the export crashes); an empty
    scene comes out as a blank image. So: drop the deleted, redraw each frame as a rectangle with its name
    as a text element, and refuse an empty canvas with a message.
    """
    try:
        elements = live_elements(raw, source)
    except SceneError as error:
        raise NothingToExport(str(error)) from error
    if not elements:
        raise NothingToExport(f"{source}: the canvas is empty (no live elements): nothing to export")
    live_ids = {e["id"] for e in elements}
    out = []
    for element in elements:
        element = {**element, "boundElements": [b for b in element.get("boundElements") or []
                                                 if isinstance(b, dict) and b.get("id") in live_ids] or None}
        if element.get("frameId"):
            element["frameId"] = None
        if element["type"] in FRAME_TYPES:
            name = element.pop("name", None)
            element["type"] = "rectangle"
            out.append(element)
            if name:
                out.append(_frame_name(element, str(name)))
            continue
        out.append(element)
    return {**raw, "elements": out}


def _frame_name(frame: dict, name: str) -> dict:
    padding = FRAME_NAME_SIZE / 2
    return {
        "id": f"{frame['id']}-name", "type": "text", "x": frame["x"] + padding, "y": frame["y"] + padding,
        "width": len(name) * FRAME_NAME_SIZE * 0.6, "height": FRAME_NAME_SIZE * 1.25, "angle": 0,
        "strokeColor": frame.get("strokeColor", "#1e1e1e"), "backgroundColor": "transparent", "fillStyle": "solid",
        "strokeWidth": 1, "strokeStyle": "solid", "roughness": 0, "opacity": 100, "groupIds": [], "frameId": None,
        "roundness": None, "seed": 1, "version": 1, "versionNonce": 1, "isDeleted": False, "boundElements": None,
        "updated": 1, "link": None, "locked": False, "text": name, "originalText": name, "fontSize": FRAME_NAME_SIZE,
        "fontFamily": 5, "textAlign": "left", "verticalAlign": "top", "containerId": None, "lineHeight": 1.25,
        "autoResize": True,
    }


@dataclass(frozen=True)
class Variant:
    suffix: str  # appended to the drawing's name, e.g. ".dark.svg"
    args: tuple[str, ...]


SVG = Variant(".svg", ("--format", "svg"))
PNG = Variant(".png", ("--format", "png", "--scale", PNG_SCALE))
DARK_SVG = Variant(".dark.svg", ("--format", "svg", "--dark"))
# The site shows SVGs (light and dark, one per palette); the PNG is for slides, chat and attempt-d2.png.
REFERENCE_VARIANTS = (SVG, DARK_SVG, PNG)


def exporter_available() -> bool:
    return shutil.which("node") is not None and EXPORTER_BIN.exists()


def export(source: Path, variant: Variant, out_dir: Path) -> Path:
    """Export one drawing; returns the written file."""
    if not exporter_available():
        raise ExporterMissing(EXPORTER_MISSING)
    target = out_dir / f"{source.stem}{variant.suffix}"
    try:
        raw = json.loads(source.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise NothingToExport(f"{source}: not an Excalidraw file (not JSON: {error})") from error
    scene = exportable_scene(raw, str(source))
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="d2kit-export-") as tmp:
        prepared = Path(tmp) / source.name
        prepared.write_text(json.dumps(scene), encoding="utf-8")
        # The installed binary, not npx: nothing is fetched at export time (the lockfile decided the version), and
        # npx's own start-up nearly doubled each export's time.
        command = [str(EXPORTER_BIN), "convert", str(prepared), *variant.args, "-o", str(target.resolve())]
        result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not target.exists():
        raise RuntimeError(f"export of {source} failed: {(result.stderr or result.stdout).strip()}")
    return target


def export_many(jobs: list[tuple[Path, Variant, Path]]) -> list[Path]:
    # Each export is a node process of ~1.5 s; two at a time matches a small CI machine.
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda job: export(*job), jobs))


def reference_sources() -> list[Path]:
    return sorted(DIAGRAM_DIR.glob("*.excalidraw"))


def stale_exports(sources: list[Path] | None = None) -> list[str]:
    """Exports that are missing or differ from a fresh export of their source (empty list: all fresh)."""
    sources = reference_sources() if sources is None else sources
    with tempfile.TemporaryDirectory(prefix="d2kit-diagrams-") as tmp:
        fresh_dir = Path(tmp)
        jobs = [(source, variant, fresh_dir) for source in sources for variant in REFERENCE_VARIANTS]
        export_many(jobs)
        problems = []
        for source, variant, _ in jobs:
            name = f"{source.stem}{variant.suffix}"
            committed = source.parent / name
            if not committed.exists():
                problems.append(f"{committed.relative_to(REPO_ROOT)}: missing")
            elif committed.read_bytes() != (fresh_dir / name).read_bytes():
                problems.append(f"{committed.relative_to(REPO_ROOT)}: out of date with its source")
        return problems


def _fail(message: str) -> typer.Exit:
    typer.secho(message, fg=typer.colors.RED, err=True)
    return typer.Exit(code=1)


@app.command("export")
def export_command(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="An .excalidraw file."),
    format: str = typer.Option("both", "--format", help="svg, png or both."),
    out: Path | None = typer.Option(None, "--out", help="Output directory (default: next to FILE)."),
) -> None:
    """Export one drawing, e.g. your attempt-d2.excalidraw -> attempt-d2.png."""
    variants = {"svg": (SVG,), "png": (PNG,), "both": (SVG, PNG)}.get(format)
    if variants is None:
        raise _fail(f"--format must be svg, png or both, not {format!r}")
    out_dir = out or file.resolve().parent
    _export_and_list([(file, variant, out_dir) for variant in variants], shown=lambda path: path)


@app.command("export-all")
def export_all_command() -> None:
    """Re-export every reference diagram in designs/d2/diagrams (light SVG, dark SVG, PNG)."""
    _export_and_list([(source, variant, source.parent)
                      for source in reference_sources() for variant in REFERENCE_VARIANTS],
                     shown=lambda path: path.relative_to(REPO_ROOT))


def _export_and_list(jobs, shown) -> None:
    """Export, turning a missing or failing exporter into a clear error; print each file written."""
    try:
        written = export_many(jobs)
    except RuntimeError as exc:  # the exporter missing or failing, or nothing to export
        raise _fail(str(exc)) from exc
    for path in written:
        typer.echo(f"wrote {shown(path)}")


@app.command("check")
def check_command() -> None:
    """Fail if any reference diagram's exports are missing or stale (CI runs this through the tests)."""
    try:
        problems = stale_exports()
    except (ExporterMissing, RuntimeError) as exc:
        raise _fail(str(exc)) from exc
    if problems:
        raise _fail("stale diagram exports (run `make diagrams`):\n  " + "\n  ".join(problems))
    typer.echo(f"{len(reference_sources())} diagrams, all exports fresh")
