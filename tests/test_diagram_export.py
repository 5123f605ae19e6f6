"""The exporter takes any drawing a candidate makes: frames, deleted elements, and an empty canvas said plainly.

The npm exporter crashes on a frame's name (it measures text on a canvas jsdom does not have), sizes the image
to deleted elements, and exports an empty scene as a blank image; ``exportable_scene`` prepares the scene so
none of that reaches it. The real-export tests run only where ``npm ci`` installed the exporter.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from d2kit.site import diagrams

DRAWINGS = Path(__file__).parent / "data" / "diagrams"
needs_exporter = pytest.mark.skipif(not diagrams.exporter_available(),
                                    reason=f"!! DIAGRAM EXPORT NOT TESTED: {diagrams.EXPORTER_MISSING}")


def _scene(name: str) -> dict:
    return json.loads((DRAWINGS / name).read_text())


def _png_size(path: Path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


def test_frames_become_rectangles_with_their_name_as_text():
    prepared = diagrams.exportable_scene(_scene("frame.excalidraw"), "frame")
    types = [e["type"] for e in prepared["elements"]]
    assert "frame" not in types and types.count("rectangle") == 3
    assert any(e["type"] == "text" and e["text"] == "Workers" for e in prepared["elements"])
    assert all(e.get("frameId") is None for e in prepared["elements"])


def test_deleted_elements_are_dropped_before_export():
    prepared = diagrams.exportable_scene(_scene("deleted.excalidraw"), "deleted")
    assert all(not e.get("isDeleted") for e in prepared["elements"]) and len(prepared["elements"]) == 2


def test_an_empty_canvas_is_refused_with_a_message():
    with pytest.raises(diagrams.NothingToExport, match="the canvas is empty"):
        diagrams.exportable_scene(_scene("empty.excalidraw"), "empty")


@needs_exporter
def test_a_drawing_with_a_frame_exports(tmp_path: Path):
    written = diagrams.export(DRAWINGS / "frame.excalidraw", diagrams.PNG, tmp_path)
    assert _png_size(written) == ((400 + 20) * 2, (200 + 20) * 2)  # the frame's box plus padding, at scale 2


@needs_exporter
def test_a_deleted_element_does_not_size_the_export(tmp_path: Path):
    written = diagrams.export(DRAWINGS / "deleted.excalidraw", diagrams.PNG, tmp_path)
    assert _png_size(written) == ((100 + 20) * 2, (50 + 20) * 2)  # one live box, not 2801 x 2200


@needs_exporter
def test_exporting_an_empty_canvas_says_so_and_writes_nothing(tmp_path: Path):
    result = CliRunner().invoke(diagrams.app, ["export", str(DRAWINGS / "empty.excalidraw"), "--out", str(tmp_path)])
    assert result.exit_code == 1 and "the canvas is empty" in result.output
    assert list(tmp_path.iterdir()) == []
