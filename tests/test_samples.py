"""The sample attempts on the site: the scorer's verdicts still match the ones checked by hand, the pages show
where the hand check disagrees, and every sample has its page in the navigation."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml
from typer.testing import CliRunner

from d2kit.cli import app
from d2kit.scoring import samples
from d2kit.scoring.calibration import CALIBRATION_DIR
from d2kit.site.samples import sample_page, samples_index

ROOT = Path(__file__).resolve().parents[1]


def test_the_scorer_still_says_what_was_checked_by_hand():
    found = samples.all_differences()
    assert not found, (
        "The scorer changed its verdict on rubric lines of the site's sample attempts. Run `d2kit score --samples`, "
        "read each line below against its attempt, and update rubric/samples.yaml (scored, hand, quotes, note):\n"
        + "\n".join(found))


def test_a_changed_verdict_is_reported_line_by_line():
    """The negative control: a hand check recorded at other points, or a line the scorer does not have."""
    one = samples.load_samples()[0]
    report = samples.scored(one.slug)
    check_id, hand = next(iter(one.checks.items()))
    moved = dataclasses.replace(hand, points=hand.points + 1)
    stale = dataclasses.replace(one, checks={**one.checks, check_id: moved, "retired_line": hand})
    found = samples.differences(stale, report)
    assert len(found) == 2
    assert found[0].startswith(f"{one.slug} retired_line: checked by hand, but the scorer no longer has")
    assert found[1].startswith(f"{one.slug} {check_id}: checked at {hand.points + 1:g}")
    unchecked = dataclasses.replace(one, checks={k: v for k, v in one.checks.items() if k != check_id})
    assert samples.differences(unchecked, report) == [
        f"{one.slug} {check_id}: never checked by hand; {samples._now(samples.checks_of(report)[0])}"]


def test_d2kit_score_samples_exits_zero_only_when_nothing_moved():
    result = CliRunner().invoke(app, ["score", "--samples"])
    assert result.exit_code == 0, result.output
    assert f"every hand-checked line in {len(samples.load_samples())} sample attempts" in result.output


def test_samples_run_weak_to_excellent_and_every_line_has_a_hand_check():
    bands = yaml.safe_load((CALIBRATION_DIR / "tuning" / "bands.yaml").read_text(encoding="utf-8"))["attempts"]
    chosen = samples.load_samples()
    assert 4 <= len(chosen) <= 6
    tiers = [bands[one.attempt]["tier"] for one in chosen]
    assert tiers[0] == "weak" and tiers[-1] == "strong" and "middling" in tiers
    assert [one.band[0] for one in chosen] == sorted(one.band[0] for one in chosen)
    assert any(not one.realistic_45min for one in chosen) and any(one.realistic_45min for one in chosen)
    for one in chosen:
        assert one.probes, f"{one.slug}: what would the interviewer probe next?"
        for check_id, hand in one.checks.items():
            if hand.disagrees(_max(one, check_id)):
                assert hand.note, f"{one.slug} {check_id}: a disagreement needs its reason"


def _max(one: samples.Sample, check_id: str) -> float:
    return next(k.max_points for k in samples.checks_of(samples.scored(one.slug)) if k.id == check_id)


def test_pages_show_the_scorer_and_where_the_hand_check_disagrees():
    index = samples_index()
    for one in samples.load_samples():
        page = sample_page(one.slug)
        report = samples.scored(one.slug)
        assert f"{report.total:g} of {report.max_total:g}" in page
        assert one.path.read_text(encoding="utf-8").splitlines()[0] in page  # the attempt as written
        disagree = [k for k in samples.checks_of(report) if one.checks[k.id].disagrees(k.max_points)]
        assert page.count("| ✗ ") == len(disagree)
        assert page.count("| ✓ agrees.") == len(samples.checks_of(report)) - len(disagree)
        assert f"| {len(disagree)} of {len(samples.checks_of(report))} rubric lines |" in index
        for probe in one.probes:
            assert f"(../answer-key.md#fu{probe.follow_up})" in page


def test_every_sample_has_a_page_in_the_nav_linked_from_how_to_practise():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for one in samples.load_samples():
        page = ROOT / "docs" / "samples" / f"{one.slug}.md"
        assert f'sample_page("{one.slug}")' in page.read_text(encoding="utf-8")
        assert f"samples/{one.slug}.md" in nav
    assert {p.stem for p in (ROOT / "docs" / "samples").glob("*.md")} == (
        {one.slug for one in samples.load_samples()} | {"index"})
    practise = (ROOT / "docs" / "index.md").read_text(encoding="utf-8").split("## What is on this site")[0]
    assert "(samples/index.md)" in practise
