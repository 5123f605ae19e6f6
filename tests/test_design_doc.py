"""design_doc's readers of other tools' output (load results, drill reports) and its links into the code.

The readers must tolerate whatever shape the files have today -- or their absence -- because the site
has to build before the load test or a drill has ever run.
"""

from __future__ import annotations

import json
import re

import pytest

from d2kit import capacity
from d2kit.scoring import pasted, scorer
from d2kit.site import design_doc
from d2kit.site import hooks as docs_site


def test_no_load_results_means_not_measured(tmp_path):
    assert design_doc.read_load_results(tmp_path / "latest.json") is None
    (tmp_path / "latest.json").write_text("{not json")
    assert design_doc.read_load_results(tmp_path / "latest.json") is None


def test_load_results_are_read_from_any_nesting_and_spelling(tmp_path):
    path = tmp_path / "latest.json"
    path.write_text(json.dumps({"finished_at": "2026-01-02T03:04:05Z",
                                "summary": {"jobs_per_second": 1200.0, "workers": 4},
                                "latency": {"pickup_p99_ms": 38.5}, "claim": {"claim_ms_mean": 2.5}}))
    load = design_doc.read_load_results(path)
    assert load.throughput_per_second == 1200
    assert load.dispatch_per_process == 300  # derived: throughput / workers
    assert load.start_delay_p99_ms == 38.5
    assert load.claim_transaction_ms == 2.5
    assert load.measured_at == "2026-01-02T03:04:05Z"


def test_stated_vs_measured_reruns_the_arithmetic(tmp_path):
    path = tmp_path / "latest.json"
    path.write_text(json.dumps({"per_worker_per_second": 100, "claim_transaction_ms": 8}))
    scale = capacity.load_scale()
    stated = capacity.derive(scale)
    rows = design_doc.compare(scale, stated, design_doc.read_load_results(path))
    by_figure = {row.figure: row for row in rows}
    dispatch = by_figure["dispatch rate of one worker process"].measured
    processes = capacity.derive(scale, dispatch_per_process=100).pools["short"].processes_for_dispatch
    assert dispatch.startswith("100/s") and f"{processes} short-pool processes for dispatch" in dispatch
    assert "1,250/s" in by_figure["d2_claim transaction time"].measured  # 10 rows x 1000 ms / 8 ms
    assert by_figure["fire time to handler start, p99"].measured is None  # not in the file: not invented


def test_unrun_drill_page_says_how_to_produce_the_report(tmp_path, monkeypatch):
    monkeypatch.setattr(design_doc, "DRILL_REPORTS", tmp_path)
    assert design_doc.read_drill_report("worker-partition", tmp_path) is None
    text = docs_site.drill_report("worker-partition")
    assert "d2kit drill run worker-partition" in text


def test_published_drill_report_is_embedded_with_its_timeline(tmp_path, monkeypatch):
    folder = tmp_path / "worker-partition"
    folder.mkdir()
    (folder / "report.md").write_text(
        "# Drill `worker-partition`: PASSED\n\n> **Follow-up 1.** the question\n\n"
        "See [the data](report.json).\n\n## Checks\n\nall good\n")
    (folder / "report.json").write_text(json.dumps({"passed": True, "finished_at": "2026-01-02"}))
    (folder / "timeline.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    monkeypatch.setattr(design_doc, "DRILL_REPORTS", tmp_path)
    report = design_doc.read_drill_report("worker-partition", tmp_path)
    assert report.verdict == "passed" and report.has_timeline
    text = docs_site.drill_report("worker-partition")
    assert "(reports/worker-partition/timeline.svg)" in text
    assert "(reports/worker-partition/report.json)" in text  # relative links re-rooted at the drill page
    assert "#### Checks" in text  # headings demoted under the page's "Last report"
    assert "PASSED" not in text and "the question" not in text  # already on the page above the report


def test_code_links_land_on_the_defining_section():
    site = design_doc.Links(site=True)
    assert site.code("reference_impl/sql/operations.sql", "d2_claim") == \
        "[`d2_claim`](/code/reference_impl/sql/operations.sql.md#def-d2_claim)"
    assert design_doc.Links(site=False).code("reference_impl/lease.py") == \
        "[`reference_impl/lease.py`](reference_impl/lease.py)"
    # An index is linked to the section of the table it belongs to.
    assert design_doc.symbol_anchor("reference_impl/sql/schema.sql", "occurrences_ready") == "def-occurrences"


def test_a_renamed_symbol_breaks_the_build_instead_of_the_link():
    with pytest.raises(LookupError):
        design_doc.symbol_anchor("reference_impl/sql/operations.sql", "d2_no_such_function")


def test_code_sections_keep_line_numbers():
    sections = design_doc.code_sections("reference_impl/sql/operations.sql")
    lines = (design_doc.REPO_ROOT / "reference_impl/sql/operations.sql").read_text().splitlines()
    for section in sections:
        assert lines[section.first_line - 1: section.first_line - 1 + len(section.lines)] == section.lines


def test_the_45_minute_answer_is_about_1000_words_and_earns_the_rubric():
    """The model answer a candidate compares with: short enough to type in the round, complete enough to score."""
    answer = design_doc.render_model_answer()
    assert 800 <= len(answer.split()) <= 1300, f"{len(answer.split())} words is not a 45-minute answer"
    sections = re.findall(r"^## (\d)\. ", answer, flags=re.MULTILINE)
    assert sections == [str(n) for n in range(1, 10)], "the 45-minute answer follows the nine-section template"
    report = scorer.score_text(answer, attempt="45-minute answer")
    assert report.total >= 90, f"the 45-minute answer scores {report.total} / {report.max_total}"


def test_reference_design_scores_at_least_90_on_the_kits_scorer():
    report = scorer.score_text(design_doc.render_reference_design(), attempt="reference design",
                               not_copied_from=pasted.REFERENCE_DESIGN_SOURCES)
    assert report.total >= 90, f"the reference design scores {report.total} / {report.max_total}"


@pytest.mark.parametrize("template", ["reference-design.md.j2", "answer-key.md.j2", "clarifying.md.j2",
                                      "load-tests.md.j2", "model-answer.md.j2", "measuring.md.j2"])
def test_no_wrapped_line_turns_into_a_heading(template):
    """A line that starts with '#123' (an issue number wrapped to a new line) renders as a giant heading."""
    rendered = design_doc.render(template, site=True)
    assert not [line for line in rendered.splitlines() if re.match(r"#+\d", line)]


# Numbers with units that the design pages may type by hand, and why each is not a figure of the kit's results
# file. Anything else with a unit must come from designs/d2/scale.yaml or load/results/latest.json through the
# template, so a re-measurement changes the page and a typed figure cannot go stale unnoticed.
TYPED_FIGURES = {
    "2–3 ms": "PlanetScale, 'Keeping a Postgres queue healthy' (public source, cited in the sentence)",
    "300 ms": "PlanetScale, same article",
    "800 jobs/s": "PlanetScale, same article",
    "86,400 s": "seconds in a day",
    "1,000 ms": "milliseconds in a second",
    "5 rows": "the design's count of row writes per execution, not a measurement",
    "130 ms": "measured before the fix, at commit e44fe7a (its message has it)",
    "1,000/s": "measured before the fix, at commit e44fe7a (its message has it)",
    "128 s": "measured before claim_bounds, commit 9b03bce (its message has it)",
    "100 ms": "the prompt's example short job (job durations are the prompt's)",
    "6-hour": "the prompt's example long job",
    "10×": "the template's own question: what breaks first at 10x",
}
FIGURE = re.compile(r"\b\d[\d,.–]*(?:\s?(?:ms|%|MiB|MB|GB|KB|µs|s\b|/s|rows|×)|-hour)")


def test_the_design_pages_type_no_measured_figure_by_hand():
    typed = []
    for template in sorted(design_doc.DESIGN_DIR.glob("*.j2")):
        source = re.sub(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", " ", template.read_text(encoding="utf-8"), flags=re.S)
        for line in source.splitlines():
            typed += [(template.name, m.group(0), line.strip()) for m in FIGURE.finditer(line)
                      if not any(m.group(0).startswith(allowed) or allowed in m.group(0) for allowed in TYPED_FIGURES)]
    assert not typed, "render these from load/results/latest.json or scale.yaml: " + "; ".join(map(str, typed))
