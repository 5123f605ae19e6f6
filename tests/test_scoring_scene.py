"""Reading an Excalidraw scene the way a reviewer does: labels however they were attached, arrows by binding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from drawing import Drawing

from d2kit.scoring.scene import SceneError, load_scene, read_scene


def _labels(scene) -> set[str]:
    return {s.label for s in scene.shapes if s.label}


def test_bound_and_free_text_both_label_their_box():
    d = Drawing()
    d.box("Scheduler", 0, 0)
    d.box("Postgres", 300, 0, bound=False)  # free text placed inside the box, as many people draw
    assert _labels(read_scene(d.scene())) == {"Scheduler", "Postgres"}


def test_text_grouped_with_one_box_labels_it_and_with_several_labels_the_group():
    d = Drawing()
    lone = d.box("", 0, 0, groupIds=["g1"])
    d.text("Store", 0, -40, groupIds=["g1"])  # above the box, outside it, but grouped with it
    members = [d.box("", 300 + 200 * n, 0, groupIds=["g2"]) for n in range(3)]
    d.text("Workers", 300, -40, groupIds=["g2"])
    scene = read_scene(d.scene())
    by_id = {s.id: s for s in scene.shapes}
    assert by_id[lone].label == "Store"
    group = by_id["group:g2"]
    assert group.label == "Workers" and {c.id for c in group.children} == set(members)


def test_frame_name_labels_the_frame_and_frame_members_belong_to_it():
    d = Drawing()
    frame = d.frame("Scheduler replicas", 0, 0, 400, 200)
    inside = d.box("replica", 20, 40, frameId=frame)
    sticking_out = d.box("replica", 300, 150, 200, 100, frameId=frame)  # clipped by the frame, still a member
    scene = read_scene(d.scene())
    by_id = {s.id: s for s in scene.shapes}
    assert by_id[frame].label == "Scheduler replicas"
    assert by_id[inside].parent is by_id[frame] and by_id[sticking_out].parent is by_id[frame]


def test_bound_arrows_join_their_boxes_and_arrow_labels_stay_on_the_arrow():
    d = Drawing()
    a, b = d.box("Worker", 0, 0), d.box("DB", 400, 0)
    d.arrow(a, b, "complete(token)")
    arrow = read_scene(d.scene()).arrows[0]
    assert (arrow.start.label, arrow.end.label, arrow.label) == ("Worker", "DB", "complete(token)")
    assert arrow.describe() == "'Worker' -> 'DB' (complete(token))"


def test_an_unbound_arrow_end_snaps_to_the_nearest_box_with_a_remark_or_touches_nothing():
    d = Drawing()
    a, b = d.box("Worker", 0, 0), d.box("DB", 400, 0)
    d.arrow((165, 30), (395, 30))  # stops a few pixels short of both boxes, bound to neither
    d.arrow((165, 300), (395, 300))  # far below everything
    scene = read_scene(d.scene())
    near, far = scene.arrows
    assert (near.start.id, near.end.id) == (a, b)
    assert far.start is None and far.end is None
    assert any("not bound; read as touching 'Worker'" in r for r in scene.remarks)
    assert any("touches nothing" in r for r in scene.remarks)


def test_a_line_is_a_connector_without_direction():
    d = Drawing()
    a, b = d.box("Scheduler", 0, 0), d.box("Store", 400, 0)
    d.arrow(a, b, kind="line")
    arrow = read_scene(d.scene()).arrows[0]
    assert not arrow.head_at_end and not arrow.head_at_start and arrow.describe().startswith("'Scheduler' —")


def test_deleted_elements_do_not_exist():
    d = Drawing()
    d.box("Scheduler", 0, 0)
    for element in d.elements:
        element["isDeleted"] = True
    scene = read_scene(d.scene())
    assert scene.is_empty and scene.shapes == []


def test_class_diagram_members_are_not_the_box_name():
    d = Drawing()
    d.box("Job\n- id: UUID\n+ schedule()", 0, 0, 200, 120)
    shape = read_scene(d.scene()).shapes[0]
    assert shape.name == "Job" and "schedule()" in shape.label


@pytest.mark.parametrize("content, message", [
    ("not json at all", "not JSON"),
    (json.dumps({"type": "excalidraw"}), "no 'elements' list"),
    (json.dumps({"elements": [{"x": 1}]}), "without 'id' and 'type'"),
])
def test_a_file_that_is_not_a_scene_is_named_and_explained(tmp_path: Path, content: str, message: str):
    path = tmp_path / "attempt-d2.excalidraw"
    path.write_text(content)
    with pytest.raises(SceneError, match=message):
        load_scene(path)


def test_free_text_an_arrow_is_bound_to_is_a_node():
    d = Drawing()
    api, store = d.text("API", 0, 0), d.text("Postgres", 400, 0)
    d.arrow(api, store, "insert job")
    arrow = read_scene(d.scene()).arrows[0]
    assert (arrow.start.label, arrow.end.label) == ("API", "Postgres")


def test_a_frame_around_the_drawing_does_not_swallow_the_arrow_labels():
    d = Drawing()
    d.frame("Architecture", -100, -100, 800, 400)
    worker, store = d.box("Worker", 0, 0), d.box("Store", 400, 0)
    d.arrow(worker, store)
    d.text("heartbeat", 260, 25)  # free text on the arrow, inside the frame
    scene = read_scene(d.scene())
    assert scene.arrows[0].label == "heartbeat"
    assert next(s for s in scene.shapes if s.kind == "frame").label == "Architecture"
