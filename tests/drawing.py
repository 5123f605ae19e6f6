"""Build small Excalidraw scenes in tests: boxes with labels, arrows bound (or not) to them, frames, groups."""

from __future__ import annotations

import json
from pathlib import Path

BASE = {"angle": 0, "strokeColor": "#1e1e1e", "backgroundColor": "transparent", "fillStyle": "solid",
        "strokeWidth": 2, "strokeStyle": "solid", "roughness": 1, "opacity": 100, "groupIds": [], "frameId": None,
        "roundness": None, "seed": 1, "version": 1, "versionNonce": 1, "isDeleted": False, "boundElements": [],
        "updated": 1, "link": None, "locked": False}


class Drawing:
    def __init__(self) -> None:
        self.elements: list[dict] = []

    def _add(self, element: dict) -> dict:
        element = {**BASE, **element}
        self.elements.append(element)
        return element

    def box(self, label: str, x: float, y: float, w: float = 160, h: float = 60, *, bound: bool = True,
            kind: str = "rectangle", **extra) -> str:
        box_id = f"box{len(self.elements)}"
        self._add({"id": box_id, "type": kind, "x": x, "y": y, "width": w, "height": h, **extra})
        if label:
            self.text(label, x + 10, y + 10, container=box_id if bound else None)
        return box_id

    def text(self, text: str, x: float, y: float, *, container: str | None = None, **extra) -> str:
        text_id = f"text{len(self.elements)}"
        self._add({"id": text_id, "type": "text", "x": x, "y": y, "width": 8 * len(text), "height": 20,
                   "text": text, "originalText": text, "fontSize": 16, "fontFamily": 5, "textAlign": "left",
                   "verticalAlign": "top", "containerId": container, "lineHeight": 1.25, **extra})
        return text_id

    def frame(self, name: str, x: float, y: float, w: float, h: float) -> str:
        frame_id = f"frame{len(self.elements)}"
        self._add({"id": frame_id, "type": "frame", "x": x, "y": y, "width": w, "height": h, "name": name})
        return frame_id

    def centre(self, element_id: str) -> tuple[float, float]:
        e = next(e for e in self.elements if e["id"] == element_id)
        return e["x"] + e["width"] / 2, e["y"] + e["height"] / 2

    def arrow(self, start: str | tuple[float, float], end: str | tuple[float, float], label: str = "", *,
              kind: str = "arrow", both_heads: bool = False) -> str:
        """Bound to boxes given by id; free ends given as points."""
        (sx, sy) = self.centre(start) if isinstance(start, str) else start
        (ex, ey) = self.centre(end) if isinstance(end, str) else end
        arrow_id = f"arrow{len(self.elements)}"
        self._add({"id": arrow_id, "type": kind, "x": sx, "y": sy, "width": abs(ex - sx), "height": abs(ey - sy),
                   "points": [[0, 0], [ex - sx, ey - sy]],
                   "startBinding": {"elementId": start, "focus": 0, "gap": 4} if isinstance(start, str) else None,
                   "endBinding": {"elementId": end, "focus": 0, "gap": 4} if isinstance(end, str) else None,
                   "startArrowhead": "arrow" if both_heads else None,
                   "endArrowhead": "arrow" if kind == "arrow" else None})
        if label:
            self.text(label, (sx + ex) / 2, (sy + ey) / 2, container=arrow_id)
        return arrow_id

    def scene(self) -> dict:
        return {"type": "excalidraw", "version": 2, "source": "tests", "elements": self.elements,
                "appState": {"viewBackgroundColor": "#ffffff"}, "files": {}}

    def save(self, path: Path) -> Path:
        # Written whole, then renamed into place, as a browser saving the scene does (Chromium writes a .crswap file
        # and renames it): a plain write_text creates the file empty first, and a practice round polling a loaded
        # machine once saw that empty file twice and counted it as a save of its own.
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(self.scene()), encoding="utf-8")
        partial.replace(path)
        return path


def strong() -> Drawing:
    """The shape of a strong answer: API, replicated schedulers, a store, a worker pool, every flow labelled."""
    d = Drawing()
    client = d.box("Client", 0, 0)
    api = d.box("API", 0, 150)
    store = d.box("Postgres\njobs, occurrences UNIQUE(job_id, fire_at)", 300, 150, 260, 80)
    schedulers = [d.box(f"Scheduler {n}", 300 + 180 * n, 0) for n in range(3)]
    pool = d.box("Worker pool", 280, 350, 560, 140)
    workers = [d.box("worker", 300 + 180 * n, 400, 140, 60) for n in range(3)]
    d.arrow(client, api, "submit")
    d.arrow(api, store, "insert job")
    for scheduler in schedulers:
        d.arrow(scheduler, store, "due jobs")
    d.arrow(pool, store, "claim: SKIP LOCKED, lease 30 s")
    d.arrow(workers[0], store, "heartbeat; complete(fencing token)")
    return d
