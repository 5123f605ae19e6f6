"""Part 3: the drawing graded from its scene, with the labels behind every point and behind every miss."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import pytest
from drawing import Drawing, strong

from d2kit.scoring.diagram import grade_file, grade_scene
from d2kit.scoring.document import parse
from d2kit.scoring.export_check import check_export
from d2kit.scoring.rubric import load_diagram_rubric
from d2kit.scoring.scene import read_scene

SECTION_5 = parse("## 5. High-level architecture\n\nClients call the API, which writes jobs to Postgres. Three "
                  "scheduler replicas read due jobs; a worker pool claims them with a lease.\n")


def _grade(d: Drawing, doc=SECTION_5):
    return grade_scene(read_scene(d.scene()), doc)


def _check(grade, check_id):
    return next(c for c in grade.checks if c.id == check_id)


def test_the_rubric_adds_up_and_every_check_is_graded():
    rubric = load_diagram_rubric()
    assert rubric.points == 20
    graded = {c.id for c in _grade(strong()).checks}
    assert graded == {k.id for c in rubric.criteria for k in c.checks}


def test_a_strong_drawing_earns_everything_and_quotes_its_labels():
    grade = _grade(strong())
    assert grade.points == 20 and grade.band.startswith("strong")
    assert "'Scheduler 1'" in _check(grade, "replicated_scheduler").evidence
    assert any("claim: SKIP LOCKED" in e for e in _check(grade, "worker_dispatch_flow").evidence)
    assert any("fencing token" in e for e in _check(grade, "fencing_visible").evidence)


def test_open_vocabulary_executor_runner_and_db_are_worker_and_store():
    d = Drawing()
    api, db = d.box("Gateway", 0, 0), d.box("main DB", 300, 0)
    planner = d.box("Planner x2 (leader election)", 300, -200)
    runners = d.box("Executors (runner fleet)", 300, 200)
    d.arrow(api, db)
    d.arrow(planner, db)
    d.arrow(runners, db, both_heads=True)
    grade = _grade(d, doc=None)
    earned = {c.id for c in grade.checks if c.level == "full"}
    assert {"replicated_scheduler", "durable_store", "worker_fleet", "dispatch_path", "submit_flow",
            "scheduler_store_flow", "worker_dispatch_flow", "completion_flow"} <= earned


def test_one_scheduler_box_is_a_single_point_of_failure_named_by_its_label():
    d = strong()
    for element in d.elements:
        if element.get("text", "").startswith("Scheduler ") and element["text"] != "Scheduler 1":
            element["text"] = element["originalText"] = "config loader"
    check = _check(_grade(d), "replicated_scheduler")
    assert check.points == 0 and "one scheduler, 'Scheduler 1'" in check.missing[0]


def test_boxes_without_arrows_earn_no_flow_and_the_miss_says_so():
    d = Drawing()
    for n, label in enumerate(["API", "Scheduler x3", "Postgres", "Workers x10"]):
        d.box(label, 200 * n, 0)
    grade = _grade(d)
    flows = [c for c in grade.checks if c.criterion == "flows"]
    assert all(c.points == 0 for c in flows)
    assert _check(grade, "dispatch_path").points == 0
    assert "no arrow path from the client/API to the store" in _check(grade, "submit_flow").missing


def test_a_push_from_a_cron_box_is_not_a_durable_dispatch_path():
    d = Drawing()
    cron, worker, redis = d.box("Cron", 0, 0), d.box("Lambda x3", 300, 0), d.box("Redis", 300, 200)
    d.arrow(cron, worker, "invoke")
    d.arrow(worker, redis, "result")
    grade = _grade(d, doc=None)
    assert _check(grade, "dispatch_path").points == 0
    assert _check(grade, "completion_flow").points == 1.5  # the result still goes back to the store


def test_agreement_lists_what_is_only_in_the_drawing_or_only_in_section_5():
    d = Drawing()
    d.box("Redis", 0, 0)
    d.box("Cron box", 300, 0)
    check = _check(_grade(d), "agreement")
    assert check.points == 0
    assert "in section 5 but not drawn: workers" in check.missing
    assert "in section 5 but not drawn: postgres" in check.missing
    assert "drawn but not in section 5: redis" in check.missing


def test_an_empty_section_5_has_nothing_to_agree_with():
    check = _check(_grade(strong(), doc=parse("## 5. High-level architecture\n\n")), "agreement")
    assert check.points == 0 and "section 5 of the document is empty" in check.missing[0]


def test_an_empty_canvas_and_a_broken_file_grade_zero_with_the_reason(tmp_path: Path):
    empty = Drawing().save(tmp_path / "empty.excalidraw")
    assert grade_file(empty, SECTION_5).problem == "the canvas is empty"
    broken = tmp_path / "broken.excalidraw"
    broken.write_text("{")
    grade = grade_file(broken, SECTION_5)
    assert grade.points == 0 and "not JSON" in grade.problem


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IEND", b""))


@pytest.fixture
def scene(tmp_path: Path) -> Path:
    d = Drawing()
    d.box("Scheduler", 0, 0, 200, 100)
    d.box("Store", 300, 0, 200, 100)
    return d.save(tmp_path / "attempt-d2.excalidraw")  # 500 x 100: exports at 520 x 120 per scale unit


def test_a_png_of_the_scenes_size_at_some_scale_is_its_export(scene: Path):
    image = scene.with_suffix(".png")
    image.write_bytes(_png(1040, 240))
    check = check_export(scene, image)
    assert check.ok and "scale 2" in check.verdict


def test_a_png_of_another_drawing_or_older_than_the_scene_is_not(scene: Path):
    image = scene.with_suffix(".png")
    image.write_bytes(_png(1600, 900))
    assert not check_export(scene, image).ok
    image.write_bytes(_png(520, 120))
    stale = scene.stat().st_mtime - 3600
    os.utime(image, (stale, stale))
    assert "older than the scene" in check_export(scene, image).verdict


def test_an_svg_must_carry_the_scenes_text(scene: Path):
    image = scene.with_suffix(".svg")
    image.write_text('<svg width="520" height="120"><text>Scheduler</text></svg>')
    check = check_export(scene, image)
    assert not check.ok and "Store" in check.verdict
    image.write_text('<svg width="520" height="120"><text>Scheduler</text><text>Store</text></svg>')
    assert check_export(scene, image).ok


def test_a_missing_or_fake_export_is_named(scene: Path):
    assert "no export" in check_export(scene, scene.with_suffix(".png")).verdict
    fake = scene.with_suffix(".png")
    fake.write_text("not a png")
    assert check_export(scene, fake).verdict == "neither a PNG nor an SVG"
