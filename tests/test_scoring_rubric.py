"""The rubric data is consistent, drives the scorer, and renders to the docs site."""

from __future__ import annotations

from d2kit.scoring.rubric import load_design_rubric, load_process_rubric, render_rubric_markdown
from d2kit.scoring.scorer import DETECTORS


def test_five_criteria_carry_100_points_in_descending_weight():
    rubric = load_design_rubric()
    points = [c.points for c in sorted(rubric.criteria, key=lambda c: c.rank)]
    assert len(points) == 5
    assert sum(points) == 100
    assert points == sorted(points, reverse=True) and len(set(points)) == 5


def test_each_criterion_is_the_sum_of_its_checks_and_follow_ups():
    rubric = load_design_rubric()
    for criterion in rubric.criteria:
        parts = [k.points for k in criterion.checks] + [f.points for f in rubric.follow_ups_for(criterion.id)]
        assert sum(parts) == criterion.points, criterion.id


def test_every_check_and_follow_up_has_exactly_one_detector():
    rubric = load_design_rubric()
    ids = [k.id for c in rubric.criteria for k in c.checks] + [f.id for f in rubric.follow_ups]
    assert len(ids) == len(set(ids))
    assert set(ids) == set(DETECTORS)


def test_seven_follow_ups_each_credited_to_a_criterion():
    rubric = load_design_rubric()
    assert [f.number for f in rubric.follow_ups] == list(range(1, 8))
    criteria = {c.id for c in rubric.criteria}
    assert all(f.credited_in in criteria for f in rubric.follow_ups)
    assert "fencing token" in rubric.follow_ups[0].probe


def test_template_sections_clarifications_and_phases():
    design, process = load_design_rubric(), load_process_rubric()
    assert [s.number for s in design.sections] == list(range(1, 10))
    assert [c.id for c in design.clarifications] == ["scale", "delivery", "latency", "ordering", "tenancy"]
    phases = process.phases
    assert [(p.start, p.end) for p in phases] == [(0, 5), (5, 10), (10, 20), (20, 35), (35, 45)]
    assert sorted(s for p in phases for s in p.sections) == list(range(1, 10))
    assert process.deep_dive_deadline.minute == 25


def test_rendered_rubric_has_every_part_for_the_docs_site():
    markdown = render_rubric_markdown()
    design, process = load_design_rubric(), load_process_rubric()
    assert markdown.startswith("# Rubric\n")
    for criterion in design.criteria:
        assert criterion.title in markdown
    for section in design.sections:
        assert f"{section.number}. {section.title}" in markdown
    for follow_up in design.follow_ups:
        assert " ".join(follow_up.question.split()) in markdown
    for check in process.checks:
        assert check.title in markdown
    # The follow-ups sit in a collapsed block, so reading the rubric does not spoil them.
    collapsed = markdown.index('??? warning "Open only after your 45 minutes are up"')
    assert markdown.index(design.follow_ups[0].topic) > collapsed
    assert "{{" not in markdown and "| None |" not in markdown
