"""An Excalidraw scene read as a reviewer reads it: labelled shapes, the arrows between them, free notes.

Labels come from text bound to a shape (Excalidraw's own container text) and from free text placed inside a
shape or sharing a group with exactly one shape, because people draw both ways. An arrow's ends come from its
start/end bindings; an end that is not bound is matched to the nearest shape within ``SNAP_DISTANCE`` (a
hand-drawn arrow that stops short of a box still means that box), and every such match is reported as a note.
Deleted elements do not exist.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

FRAME_TYPES = {"frame", "magicframe"}
SHAPE_TYPES = {"rectangle", "ellipse", "diamond"} | FRAME_TYPES
CONNECTOR_TYPES = {"arrow", "line"}
SNAP_DISTANCE = 60.0  # px from an unbound arrow end to a shape's edge that still reads as "touching" it
ARROW_LABEL_DISTANCE = 40.0  # px from a free text's centre to an arrow's path for it to label that arrow
MEMBER_LINE = re.compile(r"^\s*[-+#~]\s*\w+\s*[:(]")


class SceneError(ValueError):
    """The file is not an Excalidraw scene; the message names what is wrong."""


@dataclass(frozen=True)
class Box:
    left: float
    top: float
    right: float
    bottom: float

    @property
    def centre(self) -> tuple[float, float]:
        return (self.left + self.right) / 2, (self.top + self.bottom) / 2

    @property
    def area(self) -> float:
        return (self.right - self.left) * (self.bottom - self.top)

    def contains_point(self, x: float, y: float) -> bool:
        return self.left <= x <= self.right and self.top <= y <= self.bottom

    def contains(self, other: Box) -> bool:
        return (self.left <= other.left and self.top <= other.top and other.right <= self.right
                and other.bottom <= self.bottom and self.area > other.area)

    def distance_to(self, x: float, y: float) -> float:
        dx = max(self.left - x, 0.0, x - self.right)
        dy = max(self.top - y, 0.0, y - self.bottom)
        return math.hypot(dx, dy)


@dataclass(eq=False)  # identity: two boxes with the same label are two boxes
class Shape:
    id: str
    kind: str
    box: Box
    texts: list[str] = field(default_factory=list)
    parent: Shape | None = None
    children: list[Shape] = field(default_factory=list)

    @property
    def label(self) -> str:
        return " / ".join(" ".join(t.split()) for t in self.texts)

    @property
    def name(self) -> str:
        """The label without class-diagram member lines ("- id: UUID", "+ schedule()"): what the box is called."""
        lines = [line for t in self.texts for line in t.splitlines() if not MEMBER_LINE.match(line)]
        return " ".join(" ".join(lines).split())

    def describe(self) -> str:
        if self.label:
            return f"'{self.label}'"
        inside = ", ".join(f"'{c.label}'" for c in self.children if c.label)
        return f"an unlabelled {self.kind}" + (f" around {inside}" if inside else "")


@dataclass(eq=False)
class Arrow:
    id: str
    points: list[tuple[float, float]]
    start: Shape | None
    end: Shape | None
    head_at_end: bool
    head_at_start: bool
    texts: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return " / ".join(" ".join(t.split()) for t in self.texts)

    def describe(self) -> str:
        start = self.start.describe() if self.start else "nothing"
        end = self.end.describe() if self.end else "nothing"
        symbol = {(True, True): "<->", (True, False): "->", (False, True): "<-"}.get(
            (self.head_at_end, self.head_at_start), "—")
        label = f" ({self.label})" if self.label else ""
        return f"{start} {symbol} {end}{label}"


@dataclass
class Scene:
    shapes: list[Shape]
    arrows: list[Arrow]
    notes: list[str]  # free text on the canvas that labels neither a shape nor an arrow
    remarks: list[str]  # how the reading was done where it had to guess (unbound arrows)
    element_count: int  # live elements of any kind

    @property
    def is_empty(self) -> bool:
        return self.element_count == 0



def load_scene(path: Path) -> Scene:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise SceneError(f"{path}: no such file") from error
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SceneError(f"{path}: not an Excalidraw file (not JSON: {error})") from error
    return read_scene(raw, source=str(path))


def live_elements(raw: object, source: str = "scene") -> list[dict]:
    """The scene's elements that exist (not deleted); a clear error if this is not an Excalidraw scene."""
    if not isinstance(raw, dict) or not isinstance(raw.get("elements"), list):
        raise SceneError(f"{source}: not an Excalidraw scene (no 'elements' list)")
    elements = [e for e in raw["elements"] if isinstance(e, dict)]
    if len(elements) != len(raw["elements"]) or any("type" not in e or "id" not in e for e in elements):
        raise SceneError(f"{source}: an element without 'id' and 'type' is not Excalidraw's")
    return [e for e in elements if not e.get("isDeleted")]


def _number(element: dict, key: str) -> float:
    value = element.get(key, 0)
    return float(value) if isinstance(value, int | float) else 0.0


def _points(element: dict) -> list[tuple[float, float]]:
    x, y = _number(element, "x"), _number(element, "y")
    raw = element.get("points") or [[0, 0]]
    return [(x + float(p[0]), y + float(p[1])) for p in raw if isinstance(p, list | tuple) and len(p) >= 2]


def element_box(element: dict) -> Box:
    if element.get("type") in CONNECTOR_TYPES or element.get("type") == "freedraw":
        points = _points(element) or [(_number(element, "x"), _number(element, "y"))]
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        return Box(min(xs), min(ys), max(xs), max(ys))
    x, y, w, h = (_number(element, k) for k in ("x", "y", "width", "height"))
    return Box(min(x, x + w), min(y, y + h), max(x, x + w), max(y, y + h))


def _text_of(element: dict) -> str:
    """The text with its lines kept (a box's first lines name it, later ones may be members or details)."""
    text = str(element.get("text") or element.get("originalText") or "")
    return "\n".join(" ".join(line.split()) for line in text.splitlines() if line.strip())


def _segment_distance(x: float, y: float, a: tuple[float, float], b: tuple[float, float]) -> float:
    (ax, ay), (bx, by) = a, b
    length_sq = (bx - ax) ** 2 + (by - ay) ** 2
    t = 0.0 if length_sq == 0 else max(0.0, min(1.0, ((x - ax) * (bx - ax) + (y - ay) * (by - ay)) / length_sq))
    return math.hypot(x - (ax + t * (bx - ax)), y - (ay + t * (by - ay)))


def _path_distance(points: list[tuple[float, float]], x: float, y: float) -> float:
    if len(points) == 1:
        return math.hypot(x - points[0][0], y - points[0][1])
    return min(_segment_distance(x, y, a, b) for a, b in zip(points, points[1:], strict=False))


def _innermost(shapes: list[Shape], x: float, y: float) -> Shape | None:
    inside = [s for s in shapes if s.box.contains_point(x, y)]
    return min(inside, key=lambda s: s.box.area) if inside else None


def read_scene(raw: object, source: str = "scene") -> Scene:
    elements = live_elements(raw, source)
    by_id = {e["id"]: e for e in elements}
    shapes = {e["id"]: Shape(e["id"], e["type"], element_box(e)) for e in elements
              if e["type"] in SHAPE_TYPES or e["id"] in _text_nodes(elements)}
    shape_list = list(shapes.values())
    for shape in shape_list:  # a shape drawn inside another belongs to it: "replica 1" inside "Schedulers x3"
        holders = [s for s in shape_list if s is not shape and s.box.contains(shape.box)]
        frame = shapes.get(by_id[shape.id].get("frameId") or "")
        if holders:
            _adopt(min(holders, key=lambda s: s.box.area), shape)
        elif frame is not None:  # a frame's member may stick out of it: the frame still holds it
            _adopt(frame, shape)
    for element in elements:
        if element["type"] in FRAME_TYPES and element.get("name"):
            shapes[element["id"]].texts.append(str(element["name"]).strip())

    snaps: list[tuple[str, Shape | None]] = []  # unbound arrow ends: (which end, the shape it was read as touching)
    arrows = {e["id"]: _arrow(e, by_id, shapes, shape_list, snaps) for e in elements
              if e["type"] in CONNECTOR_TYPES}
    placer = _FreeTextPlacer(shape_list, list(arrows.values()), by_id)
    for element in elements:
        text = _text_of(element) if element["type"] == "text" else ""
        container = element.get("containerId")
        if not text:
            continue
        if element["id"] in shapes:  # a text node labels itself
            shapes[element["id"]].texts.append(text)
        elif container in shapes:
            shapes[container].texts.append(text)
        elif container in arrows:
            arrows[container].texts.append(text)
        else:
            placer.place(element, text)
    remarks = [f"an arrow's {which} is not bound; read as touching {shape.describe()}, the nearest shape"
               if shape is not None else f"an arrow's {which} touches nothing (no shape within {SNAP_DISTANCE:g} px)"
               for which, shape in snaps]  # worded after the labels are placed, so they name the boxes
    return Scene(shape_list + placer.group_shapes, list(arrows.values()), placer.notes, remarks, len(elements))


def _text_nodes(elements: list[dict]) -> set[str]:
    """Free text an arrow is bound to is a node of the drawing, as a box would be: "API -> Postgres" in words."""
    bound = {b.get("elementId") for e in elements if e["type"] in CONNECTOR_TYPES
             for b in (e.get("startBinding"), e.get("endBinding")) if isinstance(b, dict)}
    return {e["id"] for e in elements if e["type"] == "text" and not e.get("containerId") and e["id"] in bound}


def _adopt(parent: Shape, child: Shape) -> None:
    child.parent = parent
    parent.children.append(child)


class _FreeTextPlacer:
    """Free text labels the shape it sits in; else the shape(s) it is grouped with; else the nearest arrow."""

    def __init__(self, shapes: list[Shape], arrows: list[Arrow], by_id: dict[str, dict]) -> None:
        self.shapes = shapes
        self.arrows = arrows
        self.members: dict[str, list[Shape]] = {}
        for shape in shapes:
            for group in by_id[shape.id].get("groupIds") or []:
                self.members.setdefault(group, []).append(shape)
        self.groups: dict[str, Shape] = {}
        self.notes: list[str] = []

    @property
    def group_shapes(self) -> list[Shape]:
        return list(self.groups.values())

    def place(self, element: dict, text: str) -> None:
        x, y = element_box(element).centre
        holder = _innermost(self.shapes, x, y) or self._group_holder(element.get("groupIds") or [])
        near = [(a, _path_distance(a.points, x, y)) for a in self.arrows if a.points]
        near = [(a, d) for a, d in near if d <= ARROW_LABEL_DISTANCE]
        # Inside a plain box, text names the box; inside a frame or a box of boxes, text beside an arrow that
        # crosses it labels the arrow (a frame around the whole drawing must not swallow the arrow labels).
        if holder is not None and not (near and (holder.children or holder.kind in FRAME_TYPES)):
            holder.texts.append(text)
        elif near:
            min(near, key=lambda pair: pair[1])[0].texts.append(text)
        else:
            self.notes.append(" ".join(text.split()))

    def _group_holder(self, group_ids: list[str]) -> Shape | None:
        """Grouped with one shape: that shape. With several: the group itself, as a box around them."""
        for group in group_ids:  # innermost group first, as Excalidraw lists them
            members = self.members.get(group, [])
            if len(members) == 1:
                return members[0]
            if len(members) > 1:
                return self.groups.get(group) or self._make_group(group, members)
        return None

    def _make_group(self, group: str, members: list[Shape]) -> Shape:
        box = Box(min(m.box.left for m in members), min(m.box.top for m in members),
                  max(m.box.right for m in members), max(m.box.bottom for m in members))
        shape = Shape(f"group:{group}", "group", box)
        for member in members:
            if member.parent is None or member.parent.box.contains(box):
                if member.parent is not None:
                    member.parent.children.remove(member)
                    if shape.parent is None:
                        _adopt(member.parent, shape)
                _adopt(shape, member)
        self.groups[group] = shape
        return shape


def _bound_shape(binding: object, by_id: dict[str, dict], shapes: dict[str, Shape]) -> Shape | None:
    if not isinstance(binding, dict):
        return None
    target = binding.get("elementId")
    if target in shapes:
        return shapes[target]
    container = by_id.get(target, {}).get("containerId")  # bound to a box's text: that box
    return shapes.get(container)


def _arrow(element: dict, by_id: dict[str, dict], shapes: dict[str, Shape], shape_list: list[Shape],
           snaps: list[tuple[str, Shape | None]]) -> Arrow:
    points = _points(element)
    ends = []
    for which, binding, point in (("start", element.get("startBinding"), points[0] if points else None),
                                  ("end", element.get("endBinding"), points[-1] if points else None)):
        shape = _bound_shape(binding, by_id, shapes)
        if shape is None and point is not None:
            shape = _nearest(shape_list, *point)
            snaps.append((which, shape))
        ends.append(shape)
    is_arrow = element["type"] == "arrow"
    head_at_end = bool(element.get("endArrowhead", "arrow" if is_arrow else None))
    head_at_start = bool(element.get("startArrowhead"))
    return Arrow(element["id"], points, ends[0], ends[1], head_at_end, head_at_start)


def _nearest(shapes: list[Shape], x: float, y: float) -> Shape | None:
    inside = _innermost(shapes, x, y)
    if inside is not None:
        return inside
    candidates = [(s, s.box.distance_to(x, y)) for s in shapes]
    candidates = [(s, d) for s, d in candidates if d <= SNAP_DISTANCE]
    return min(candidates, key=lambda pair: pair[1])[0] if candidates else None
