"""The pages that teach the round: the second questions, the senior/staff calibration, the alternative
architectures, the glossary's links and the cheat sheet (page and terminal from one source)."""

from __future__ import annotations

import re

import yaml
from typer.testing import CliRunner

from d2kit import capacity
from d2kit.cli import app
from d2kit.formatting import fmt_number
from d2kit.scoring.rubric import load_design_rubric
from d2kit.site import cheatsheet, glossary
from d2kit.site.alternatives import ALTERNATIVES_FILE, alternatives_markdown
from d2kit.site.rubric_pages import calibration_markdown, second_questions_markdown


def test_every_follow_up_has_a_second_question_on_its_page():
    page = second_questions_markdown()
    for f in load_design_rubric().follow_ups:
        assert f"{{ #fu{f.number} }}" in page
        assert " ".join(f.second_question.question.split()) in page
        assert len(f.in_two_lines) == 2, f"follow-up {f.number} needs two lines for the cheat sheet"


def test_every_criterion_has_senior_and_staff_bars():
    page = calibration_markdown()
    for c in load_design_rubric().criteria:
        assert c.title in page
        assert c.calibration.hire_phrases and c.calibration.no_hire_phrases
    assert page.count("| **Senior** |") == page.count("| **Staff** |") == len(load_design_rubric().criteria)


def test_alternatives_answer_all_seven_follow_ups_and_cite_google_cron():
    page = alternatives_markdown()
    follow_ups = load_design_rubric().follow_ups
    assert page.count(f"| [{follow_ups[-1].number}. {follow_ups[-1].topic}]") == 4
    assert "Distributed Periodic Scheduling with Cron" in page and "skipping launches" in page


def test_every_source_of_the_alternatives_links_its_public_page():
    raw = yaml.safe_load(ALTERNATIVES_FILE.read_text(encoding="utf-8"))
    sources = [s for arch in raw["architectures"] for s in arch["sources"]] + [raw["opposite_default"]["source"]]
    unlinked = [s for s in sources if not re.search(r"\]\(https://[^)\s]+\)", s)]
    assert not unlinked, f"sources a reader cannot open: {unlinked}"


def test_cheat_sheet_page_and_terminal_print_the_same_sheet():
    result = CliRunner().invoke(app, ["cheatsheet"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    page = cheatsheet.cheatsheet_markdown()
    peak = fmt_number(capacity.derive(capacity.load_scale()).peak_per_second)
    for block in cheatsheet.build():
        assert block.title in result.output and f"### {block.title}" in page
    for f in load_design_rubric().follow_ups:
        assert f.topic in result.output and f.topic in page
    assert f"{peak}/s" in result.output and f"{peak}/s" in page


def test_glossary_links_the_first_use_only_and_never_inside_code_or_headings():
    html = ("<h2>Lease</h2><p>A lease is held; the lease expires.</p>"
            "<pre><code>fencing token</code></pre><p>Use <code>SKIP LOCKED</code>, a fencing token.</p>"
            "<p><a href='x'>monotonic clock</a> then monotonic clock.</p>")
    linked = glossary.link_first_uses(html, "../glossary/")
    assert linked.count('href="../glossary/#lease"') == 1
    assert "<h2>Lease</h2>" in linked
    assert "<pre><code>fencing token</code></pre>" in linked
    assert '<a class="glossary-term" href="../glossary/#skip-locked"' in linked
    assert linked.count('href="../glossary/#fencing-token"') == 1
    assert "<a href='x'>monotonic clock</a> then <a class=\"glossary-term\"" in linked
