"""The sample attempts pages: each attempt as written, the scorer's verdict on every rubric line with its
evidence, the hand check of that verdict, and what the interviewer would probe next.

The scorer runs when the site is built, so the pages show what it says today; the hand check comes from
``rubric/samples.yaml`` (d2kit.scoring.samples), and tests/test_samples.py keeps the two in step.
"""

from __future__ import annotations

import html
import re

from d2kit.scoring.rubric import load_design_rubric
from d2kit.scoring.samples import HandCheck, Sample, checks_of, load_samples, sample, scored
from d2kit.scoring.scorer import CheckScore
from d2kit.site import design_doc
from d2kit.site.rubric_pages import table_cell


def _cell(text: str) -> str:
    """Quoted text in a table cell: markup in it is shown, not obeyed (``processing:<worker>``)."""
    return table_cell(html.escape(text, quote=False))


def _against_band(total: float, band: tuple[float, float]) -> str:
    if total < band[0]:
        return f"**{band[0] - total:g} below** the band"
    if total > band[1]:
        return f"**{total - band[1]:g} above** the band"
    return "in the band"


def _disagreements(one: Sample) -> list[str]:
    return [check.id for check in checks_of(scored(one.slug)) if one.checks[check.id].disagrees(check.max_points)]


def _words(one: Sample) -> int:
    return len(one.path.read_text(encoding="utf-8").split())


def samples_index() -> str:
    rows = ["| Attempt | Band fixed by its writer | The scorer | Realistic in 45 minutes | Hand check disagrees on |",
            "|---|---|---|---|---|"]
    for one in load_samples():
        report = scored(one.slug)
        against = _against_band(report.total, one.band)
        disagree = _disagreements(one)
        rows.append(f"| [{one.title}]({one.slug}.md) | {one.band[0]:g}–{one.band[1]:g} | {report.total:g} "
                    f"({against}) | {'yes' if one.realistic_45min else 'no'} ({_words(one):,} words) | "
                    f"{len(disagree)} of {len(checks_of(report))} rubric lines |")
    return "\n".join(rows) + "\n"


def _evidence(check: CheckScore) -> str:
    return "<br>".join(_cell(f"line {e.line}: {e.text}" if e.line else e.text) for e in check.evidence) or "—"


def _missing(check: CheckScore) -> str:
    return "<br>".join(_cell(m) for m in check.missing) or "—"


def _hand(check: CheckScore, hand: HandCheck) -> str:
    if hand.disagrees(check.max_points):
        parts = []
        if hand.hand != check.level:
            parts.append(f"deserves **{hand.hand}**, not {check.level}")
        if hand.quotes == "wrong":
            parts.append("**the quotes are wrong**")
        verdict = "✗ " + "; ".join(parts) + "."
    else:
        verdict = "✓ agrees."
    return verdict + (f" {_cell(hand.note)}" if hand.note else "")


def _attempt_block(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f'{fence}markdown linenums="1"\n{text.rstrip()}\n{fence}\n'


def sample_page(slug: str) -> str:
    one = sample(slug)
    report = scored(slug)
    disagree = _disagreements(one)
    follow_ups = {f.number: f for f in load_design_rubric().follow_ups}
    model_words = len(design_doc.render_model_answer(site=True).split())
    parts = [
        f"*From `rubric/calibration/tuning/{one.attempt}`: written for the kit by a helper who read only the prompt "
        "and the rubric, with its band fixed before anything was scored.*", "",
        f"- **Band fixed by its writer:** {one.band[0]:g}–{one.band[1]:g} of 100. Their reason: "
        f"{html.escape(one.writer_reason, quote=False)}",
        f"- **The scorer today:** {report.total:g} of {report.max_total:g}, {_against_band(report.total, one.band)}.",
        f"- **Realistic in 45 minutes:** {'yes' if one.realistic_45min else '**no**'}, says its writer. It is "
        f"{_words(one):,} words; the [45-minute answer](../reference-design.md#the-45-minute-answer) is "
        f"{model_words:,}.",
        f"- **The scorer's evidence, checked by hand:** agrees on {len(checks_of(report)) - len(disagree)} of "
        f"{len(checks_of(report))} rubric lines, disagrees on {len(disagree)} (marked ✗ below).", "",
        "## The attempt as written", "", _attempt_block(one.path.read_text(encoding="utf-8")),
        "## Rubric lines earned and missed", "",
        "Each line's points and evidence are the scorer's (`d2kit score`), run when this page was built. The last "
        "column is a person's reading of the same line against the attempt: ✗ where it deserves another level or "
        "the scorer quoted the wrong lines. The [rubric](../rubric.md) says what each line asks.", "",
    ]
    for criterion in report.criteria:
        parts += [f"### {criterion.rank}. {criterion.title}: {criterion.points:g} of {criterion.max_points:g}", "",
                  "| Rubric line | Points | Evidence the scorer quotes | Missing, says the scorer | Checked by hand |",
                  "|---|---|---|---|---|"]
        parts += [f"| {_cell(check.title)} | {check.points:g} / {check.max_points:g} | {_evidence(check)} | "
                  f"{_missing(check)} | {_hand(check, one.checks[check.id])} |" for check in criterion.checks]
        parts.append("")
    parts += ["## What the interviewer would probe next", ""]
    for probe in one.probes:
        topic = follow_ups[probe.follow_up].topic
        parts.append(f"- **[Follow-up {probe.follow_up}: {topic}](../answer-key.md#fu{probe.follow_up})** "
                     f"([its second question](../second-questions.md#fu{probe.follow_up})). {probe.text}")
    return "\n".join(parts) + "\n"
