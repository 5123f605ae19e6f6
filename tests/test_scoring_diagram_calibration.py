"""The diagram grader against drawings written apart from it: the seeded split, the tuning half, and a held-out
result that was recorded once and that the grader still reproduces (so it was not changed afterwards)."""

from __future__ import annotations

import pytest
import yaml

from d2kit.scoring.calibration_split import DIAGRAMS_DIR, SEED, split
from d2kit.scoring.diagram_calibration import load_results, render_results_markdown, score_half
from d2kit.scoring.rubric import render_rubric_markdown


def _bands(half: str) -> dict:
    return yaml.safe_load((DIAGRAMS_DIR / half / "bands.yaml").read_text())


def test_the_split_is_the_seeded_one_and_the_halves_do_not_overlap():
    tuning, heldout = _bands("tuning"), _bands("heldout")
    assert tuning["seed"] == heldout["seed"] == SEED
    names = tuning["split"]["tuning"] + tuning["split"]["heldout"]
    assert split(names) == (tuning["split"]["tuning"], tuning["split"]["heldout"])
    assert sorted(tuning["diagrams"]) == tuning["split"]["tuning"]
    assert sorted(heldout["diagrams"]) == tuning["split"]["heldout"]
    assert len(names) >= 12 and not set(tuning["diagrams"]) & set(heldout["diagrams"])


def test_every_tuning_drawing_lands_in_its_band():
    outside = [(o.name, o.grade.points, (o.low, o.high)) for o in score_half("tuning") if not o.in_band]
    assert outside == []


def test_the_held_out_result_was_recorded_and_the_grader_still_reproduces_it():
    recorded = load_results()
    if recorded is None:
        pytest.fail("the held-out half has not been scored: python -m d2kit.scoring.diagram_calibration heldout "
                    "--record")
    fresh = {o.name: o.grade.points for o in score_half("heldout")}
    assert {row["diagram"]: row["score"] for row in recorded["per_diagram"]} == fresh
    assert recorded["in_band"] == sum(row["in_band"] for row in recorded["per_diagram"])


def test_the_docs_show_part_3_and_the_held_out_figures_from_the_file():
    page = render_rubric_markdown() + render_results_markdown()
    assert "## Part 3 — The diagram — 20 points" in page and "How the drawing is read" in page
    recorded = load_results()
    assert f"Held out: {recorded['in_band']} of {recorded['diagrams']} in band" in page
    assert all(row["diagram"] in page for row in recorded["per_diagram"])
