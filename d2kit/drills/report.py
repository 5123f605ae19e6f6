"""A drill's report: ``report.md`` (for people), ``report.json`` (for machines and the docs site) and
``timeline.svg`` (the whiteboard picture), side by side in ``reports/drills/<name>/``.

``--publish`` copies the three files to ``docs/drills/reports/<name>/``, where the docs site embeds them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

from d2kit import drills as registry
from d2kit import paths

PUBLISHED_FILES = ("report.md", "report.json", "timeline.svg")
OBSERVED_CHARS = 400  # in the markdown table; report.json has everything


def write(out: Path, module: ModuleType, drill, result: dict[str, Any], svg: str) -> None:
    document = {**result, "question": registry.question(module), "answer": registry.answer(module),
                "phases": _windows(drill, drill.phases), "faults": _windows(drill, drill.faults)}
    (out / "report.json").write_text(json.dumps(document, indent=2, default=str) + "\n")
    (out / "timeline.svg").write_text(svg)
    (out / "report.md").write_text(markdown(module, drill, result))


def publish(out: Path, destination: Path) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    for name in PUBLISHED_FILES:
        shutil.copyfile(out / name, destination / name)
    # The committed copy points at itself, relative to the repository, not at this machine's reports folder.
    published = json.loads((destination / "report.json").read_text())
    published["report"] = str((destination / "report.md").relative_to(paths.ROOT))
    (destination / "report.json").write_text(json.dumps(published, indent=2, default=str) + "\n")


def _windows(drill, windows) -> list[dict[str, Any]]:
    def at(moment):
        return None if moment is None else round((moment - drill.started_at).total_seconds(), 2)
    return [{"label": w.label, "start_s": at(w.start), "end_s": at(w.end)} for w in windows]


def _cell(value: Any) -> str:
    rendered = value if isinstance(value, str) else json.dumps(value, default=str, separators=(", ", ": "))
    if len(rendered) > OBSERVED_CHARS:
        rendered = rendered[:OBSERVED_CHARS] + " …"
    return rendered.replace("|", "\\|").replace("\n", " ")


def markdown(module: ModuleType, drill, result: dict[str, Any]) -> str:
    verdict = "PASSED" if result["passed"] else "NOT RUN" if result["not_run"] else "FAILED"
    lines = [
        f"# Drill `{drill.name}`: {verdict}",
        "",
        f"> **{registry.source(module)}.** {registry.question(module)}",
        "",
        f"**The answer in three sentences.** {registry.answer(module)}",
        "",
    ]
    if drill.scaled:
        lines += ["**Scaled down:** " + "; ".join(f"{k}: {v}" for k, v in drill.scaled.items()) + ".", ""]
    lines += [f"Mode: {result['mode']} · ran {drill.started_at:%Y-%m-%d %H:%M} UTC (database clock) · "
              f"{result['duration_s']} s · `d2kit drill run {drill.name}{' --quick' if drill.quick else ''}`", ""]
    if result["not_run"]:
        lines += [f"**Not run:** {result['not_run']}. The fault could not be injected on this machine, so this "
                  "run proves nothing either way: no verdict.", ""]
    if result["negative_control"]:
        lines += [f"**Negative control:** {result['negative_control']} -- this run is EXPECTED to fail.", ""]
    lines += ["## Invariants, read from the history in PostgreSQL", "", "| holds | invariant | observed |",
              "|---|---|---|"]
    lines += [f"| {'✅' if i.holds else '❌'} | {_cell(i.name)} | {_cell(i.observed)} |" for i in drill.invariants]
    lines += ["", "## Timeline", "", "![Timeline: attempts per occurrence across worker lanes, with lease expiry, "
              "fault windows and fencing tokens](timeline.svg)", ""]
    if drill.metrics:
        lines += ["## Measurements", "", "| measurement | value |", "|---|---|"]
        lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in drill.metrics.items()]
        lines.append("")
    if drill.phases or drill.faults:
        lines += ["## What happened", "", "| | what | from (s) | to (s) |", "|---|---|---|---|"]
        lines += [f"| {kind} | {_cell(w['label'])} | {w['start_s']} | {'' if w['end_s'] is None else w['end_s']} |"
                  for kind, windows in (("phase", drill.phases), ("fault", drill.faults))
                  for w in _windows(drill, windows)]
        lines.append("")
    for note in drill.notes:
        lines += [note, ""]
    for title, body in drill.sections:
        lines += [f"## {title}", "", body, ""]
    return "\n".join(lines).rstrip() + "\n"
