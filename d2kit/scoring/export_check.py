"""Is the handed-in PNG or SVG an export of the graded scene? Then the graded drawing is the handed-in one.

Excalidraw (the app and the kit's exporter alike) sizes an export to the live elements' bounding box plus
``EXPORT_PADDING`` on each side, times the export scale; an SVG also carries every line of text. So an
image whose size fits no scale, whose text differs, or that is older than the scene, is not this scene's
export. A bytes hash would be stronger but differs between the app and the kit's exporter for one scene.
"""

from __future__ import annotations

import html
import json
import re
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

from d2kit.scoring.scene import SceneError, element_box, live_elements

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EXPORT_PADDING = 10  # px, Excalidraw's default and the kit exporter's
SCALES = (1, 2, 3, 4)
SIZE_TOLERANCE = 4  # px per scale unit: stroke widths and arrowheads poke out of the geometric box
MTIME_SLACK = 2.0  # s: an export written in the same save as the scene
SVG_TEXT = re.compile(r"<text\b[^>]*>(.*?)</text>", re.S)
SVG_SIZE = re.compile(r'<svg\b[^>]*\bwidth="([\d.]+)"[^>]*\bheight="([\d.]+)"')


@dataclass(frozen=True)
class ExportCheck:
    path: str
    ok: bool
    verdict: str

    def to_dict(self) -> dict:
        return asdict(self)


def _scene_size_and_text(scene_path: Path) -> tuple[float, float, set[str]]:
    elements = live_elements(json.loads(scene_path.read_text(encoding="utf-8")), str(scene_path))
    if not elements:
        raise SceneError(f"{scene_path}: the canvas is empty")
    boxes = [element_box(e) for e in elements]
    width = max(b.right for b in boxes) - min(b.left for b in boxes)
    height = max(b.bottom for b in boxes) - min(b.top for b in boxes)
    lines = {line.strip() for e in elements if e["type"] == "text" for line in str(e.get("text", "")).splitlines()}
    return width, height, {line for line in lines if line}


def _image_size(image: Path) -> tuple[float, float] | str:
    data = image.read_bytes()
    if data.startswith(PNG_SIGNATURE) and len(data) >= 24 and data[12:16] == b"IHDR":
        return struct.unpack(">II", data[16:24])
    if image.suffix.lower() == ".svg":
        match = SVG_SIZE.search(data.decode("utf-8", errors="replace"))
        return (float(match[1]), float(match[2])) if match else "an SVG without a width and height"
    return "neither a PNG nor an SVG"


def _fitting_scale(size: tuple[float, float], scene_w: float, scene_h: float) -> int | None:
    for scale in SCALES:
        expected = ((scene_w + 2 * EXPORT_PADDING) * scale, (scene_h + 2 * EXPORT_PADDING) * scale)
        if all(abs(got - want) <= SIZE_TOLERANCE * scale for got, want in zip(size, expected, strict=True)):
            return scale
    return None


def check_export(scene_path: Path, image: Path) -> ExportCheck:
    if not image.exists():
        return ExportCheck(str(image), False, f"no export: run `d2kit diagram export {scene_path.name} --format png`")
    try:
        scene_w, scene_h, scene_text = _scene_size_and_text(scene_path)
    except (SceneError, ValueError, OSError) as error:
        return ExportCheck(str(image), False, f"cannot compare with the scene: {error}")
    size = _image_size(image)
    if isinstance(size, str):
        return ExportCheck(str(image), False, size)
    if image.stat().st_mtime + MTIME_SLACK < scene_path.stat().st_mtime:
        return ExportCheck(str(image), False, "older than the scene: the drawing changed after this export")
    scale = _fitting_scale(size, scene_w, scene_h)
    if scale is None:
        return ExportCheck(str(image), False, f"not an export of this scene: {size[0]:g}x{size[1]:g} px, the scene "
                           f"exports at {scene_w + 2 * EXPORT_PADDING:.0f}x{scene_h + 2 * EXPORT_PADDING:.0f} px "
                           f"times 1-{SCALES[-1]}")
    if image.suffix.lower() == ".svg":
        svg_text = {html.unescape(t).strip() for t in SVG_TEXT.findall(image.read_text(encoding="utf-8"))}
        if scene_text - svg_text:
            missing = ", ".join(sorted(scene_text - svg_text)[:5])
            return ExportCheck(str(image), False, f"the SVG lacks text the scene has: {missing}")
    return ExportCheck(str(image), True, f"an export of this scene ({size[0]:g}x{size[1]:g} px, scale {scale})")
