"""``d2kit score``, ``d2kit practice`` and ``d2kit history``: the rubric's commands, added to the main app."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import typer
from rich.console import Console
from rich.prompt import FloatPrompt
from rich.table import Table

from d2kit.scoring import calibration as calibration_set
from d2kit.scoring import history as history_store
from d2kit.scoring import round_report
from d2kit.scoring.phase_timeline import picture
from d2kit.scoring.practice import PracticeSession, clock_for
from d2kit.scoring.report import render_markdown, render_rich
from d2kit.scoring.round_grade import NotAScene, RoundGrade, grade_round
from d2kit.scoring.round_record import RecordError
from d2kit.scoring.rubric import load_design_rubric
from d2kit.scoring.selfscore import ask_self_scores, comparison_table

ANSWER_KEY_HINT = ("Now, and only now, compare with the answer key (ANSWER-KEY.md → D2, the kit's reference "
                   "design on the docs site).")


def _ask(console: Console):
    def ask(prompt: str, maximum: float) -> float:
        while True:
            value = FloatPrompt.ask(prompt, console=console)
            if 0 <= value <= maximum:
                return value
            console.print(f"[red]Between 0 and {maximum:g}, please.[/]")

    return ask


def _grade(attempt: Path, diagram: Path | None) -> RoundGrade:
    try:
        return grade_round(attempt, diagram)
    except (NotAScene, RecordError) as error:
        raise typer.BadParameter(str(error)) from error


def _print_grade(grade: RoundGrade, console: Console, as_json: bool, as_md: bool) -> None:
    if as_json:
        print(json.dumps(grade.to_dict(), indent=2, ensure_ascii=False))
    elif as_md:
        print(render_markdown(grade.document) + "\n" + round_report.render_markdown(grade.diagram, grade.process),
              end="")
    else:
        render_rich(grade.document, console)
        round_report.render_diagram_rich(grade.diagram, console)
        round_report.render_process_rich(grade.process, console)
        console.print(f"[bold]Document {grade.document.total:g} / {grade.document.max_total:g} · diagram "
                      f"{grade.diagram.points:g} / {grade.diagram.max_points:g} (graded beside the document, "
                      f"not added to it)[/]")


def score(
    attempt: Path | None = typer.Argument(None, exists=True, dir_okay=False, readable=True,
                                          help="Your attempt-d2.md."),
    diagram: Path | None = typer.Option(None, "--diagram", help="Your Excalidraw scene (default: the attempt's "
                                        "name with .excalidraw). Graded from its shapes, labels and arrows; the PNG "
                                        "or SVG next to it is checked to be its export."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    as_md: bool = typer.Option(False, "--md", help="Markdown output."),
    self_score: bool = typer.Option(False, "--self", help="Score yourself against the rubric first, then compare "
                                    "with the tool."),
    record: bool | None = typer.Option(None, "--record/--no-record", help="Add this score to your history "
                                       "(default), or with --calibration write rubric/calibration/results.json."),
    calibration: bool = typer.Option(False, "--calibration", help="Score the calibration halves against their "
                                     "bands: attempts in band, Spearman ρ, mean and worst error."),
    samples: bool = typer.Option(False, "--samples", help="Compare the scorer with the hand check of the site's "
                                 "sample attempts (rubric/samples.yaml): print every rubric line that changed."),
) -> None:
    """Score a design attempt (Part 2) and its diagram (Part 3), with the evidence behind every point; Part 1
    from the practice record when there is one.

    An automatic score is a first pass; the rubric is the authority.
    """
    if calibration:
        _calibration(bool(record))
        return
    if samples:
        from d2kit.scoring import samples as sample_attempts  # only this option needs the site's samples

        raise typer.Exit(sample_attempts.report_differences())
    if attempt is None:
        raise typer.BadParameter("give an attempt to score, or --calibration")
    if self_score and (as_json or as_md):
        raise typer.BadParameter("--self is interactive; use it without --json or --md")
    console = Console()
    self_scores = ask_self_scores(load_design_rubric(), console, _ask(console)) if self_score else None
    grade = _grade(attempt, diagram)
    _print_grade(grade, console, as_json, as_md)
    if self_scores is not None:
        console.print(comparison_table(grade.document, self_scores))
        console.print(ANSWER_KEY_HINT)
    if record is not False:
        history_store.record(grade, text=attempt.read_text(encoding="utf-8"), mode="self" if self_score else "score",
                             self_scores=self_scores)


def _calibration(write: bool) -> None:
    figures = calibration_set.measure_all()
    for line in calibration_set.figures_lines(figures):
        print(line)
    if write:
        print(f"Recorded in {calibration_set.record(figures)}")


def practice(
    minutes: float = typer.Option(45, "--minutes", min=0.05, help="Length of the round; phases scale with it."),
    directory: Path = typer.Option(Path("."), "--dir", file_okay=False, help="Where attempt-d2.md is created."),
    reveal: bool = typer.Option(False, "--reveal", help="Show the hidden follow-ups now instead of at the end."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing attempt-d2.md."),
    speed: float = typer.Option(1.0, "--speed", min=1.0, hidden=True, envvar="D2KIT_PRACTICE_SPEED",
                                help="Run the clock this many times faster (for tests)."),
) -> None:
    """A timed round: creates attempt-d2.md from the template, runs the time budget while recording every
    save of attempt-d2.md and attempt-d2.excalidraw, reveals the hidden follow-ups when time is up, then
    grades the document, the diagram and the process. Ctrl-C ends the round early."""
    console = Console()
    session = PracticeSession(directory, minutes, clock_for(speed), console)
    try:
        session.create_attempt(overwrite)
    except FileExistsError as error:
        raise typer.BadParameter(str(error)) from error
    outcome = session.run(reveal_now=reveal)
    _export_png(session.diagram, console)
    grade = _grade(outcome.attempt, None)
    _print_grade(grade, console, as_json=False, as_md=False)
    history_store.record(grade, text=outcome.attempt.read_text(encoding="utf-8"), mode="practice",
                         duration_seconds=outcome.elapsed_seconds)
    console.print(f"Recorded in {history_store.history_path()}. Next: [bold]d2kit score --self "
                  f"{outcome.attempt}[/] to score yourself, then the answer key.")


def _export_png(scene: Path, console: Console) -> None:
    """The handed-in PNG is the export of the scene as it stood at time-up."""
    if not scene.exists():
        return
    from d2kit.site import diagrams as exporter  # the Excalidraw exporter: only a practised round needs it

    if not exporter.exporter_available():
        console.print("[yellow]The Excalidraw exporter is not installed (`npm ci`): export the PNG yourself.[/]")
        return
    try:
        written = exporter.export(scene, exporter.PNG, scene.parent)
    except RuntimeError as error:
        console.print(f"[yellow]Could not export {scene.name}: {error}[/]")
        return
    console.print(f"Exported {written}")


def history(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    plot: Path | None = typer.Option(None, "--plot", dir_okay=False, help="Where to write the progress PNG "
                                     "(default: progress.png next to the history file)."),
) -> None:
    """Every scored attempt: date, duration, per-criterion scores, the diagram's points, and for practised
    rounds the phase timeline; a PNG of progress on the document and the diagram."""
    records = history_store.load()
    if as_json:
        print(json.dumps([asdict(r) for r in records], indent=2))
        return
    console = Console()
    if not records:
        console.print(f"No scored attempts yet in {history_store.history_path()}. Try [bold]d2kit practice[/].")
        return
    rubric = load_design_rubric()
    table = Table(title=f"Scored attempts ({history_store.history_path()})", title_justify="left")
    for column in ("#", "Date (UTC)", "Mode", "Duration", "Attempt"):
        table.add_column(column)
    for criterion in rubric.criteria:
        table.add_column(f"{criterion.rank}. /{criterion.points:g}", justify="right")
    table.add_column("Total", justify="right")
    table.add_column("Self", justify="right")
    table.add_column("Diagram", justify="right")
    table.add_column("Part 1", justify="left")
    for index, entry in enumerate(records, start=1):
        duration = f"{entry.duration_seconds / 60:.1f} min" if entry.duration_seconds is not None else "—"
        points = [f"{entry.criteria[c.id]['points']:g}" if c.id in entry.criteria else "—" for c in rubric.criteria]
        table.add_row(str(index), entry.recorded_at.replace("T", " ")[:16], entry.mode, duration,
                      os.path.basename(entry.attempt), *points, f"{entry.total:g}",
                      f"{entry.self_total:g}" if entry.self_total is not None else "—",
                      f"{entry.diagram_points:g}/{entry.diagram_max:g}" if entry.diagram_points is not None else "—",
                      ", ".join(entry.process_checks.values()) if entry.process_checks else "not observed")
    console.print(table)
    console.print("Columns 1-5: " + "; ".join(f"{c.rank}. {c.title}" for c in rubric.criteria)
                  + ". Part 1: clarified first, time budget, diagram in time.")
    for index, entry in enumerate(records, start=1):
        if entry.process_observed:
            console.print(f"[bold]#{index} {os.path.basename(entry.attempt)}, "
                          f"{entry.recorded_at.replace('T', ' ')[:16]}: phase timeline[/]")
            console.print(picture(entry.timeline_spans(), entry.ended_minute))
    written = history_store.plot(records, plot or history_store.home() / "progress.png")
    console.print(f"Progress plot: {written}")


def register(app: typer.Typer) -> None:
    """Add the rubric's top-level commands to the main ``d2kit`` app."""
    app.command("score")(score)
    app.command("practice")(practice)
    app.command("history")(history)
