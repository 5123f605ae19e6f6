"""A round's three grades from the files the candidate handed in: document, diagram and process.

The document is scored as it stood when time was up (from the round record), so later words are shown and
not credited; the diagram is graded from the Excalidraw scene next to the attempt; the process from the
record, or "not observed" when there is none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from d2kit.scoring.diagram import DiagramGrade, grade_file
from d2kit.scoring.document import parse
from d2kit.scoring.process import ProcessObservation, observe
from d2kit.scoring.round_record import load_record
from d2kit.scoring.rubric import load_diagram_rubric
from d2kit.scoring.scorer import ScoreReport, score_text

SCENE_SUFFIX = ".excalidraw"
IMAGE_SUFFIXES = (".png", ".svg")


class NotAScene(ValueError):
    pass


@dataclass
class RoundGrade:
    document: ScoreReport
    diagram: DiagramGrade
    process: ProcessObservation

    def to_dict(self) -> dict:
        return {**self.document.to_dict(), "diagram": self.diagram.to_dict(), "process": self.process.to_dict()}


def scene_for(attempt: Path, diagram: Path | None) -> Path:
    """The explicit --diagram (an Excalidraw scene), else the attempt's name with .excalidraw."""
    if diagram is None:
        return attempt.with_suffix(SCENE_SUFFIX)
    if diagram.suffix.lower() in IMAGE_SUFFIXES:
        raise NotAScene(f"{diagram} is an image: the drawing is graded from its Excalidraw scene. Pass the "
                        f"{diagram.with_suffix(SCENE_SUFFIX).name} you drew (Excalidraw: Save to… / the .excalidraw "
                        f"file); the image next to it is checked to be its export")
    return diagram


def image_for(scene: Path) -> Path:
    """The export handed in with the scene: its PNG, else its SVG (a missing PNG is reported as such)."""
    return next((scene.with_suffix(s) for s in IMAGE_SUFFIXES if scene.with_suffix(s).exists()),
                scene.with_suffix(IMAGE_SUFFIXES[0]))


def grade_round(attempt: Path, diagram: Path | None = None) -> RoundGrade:
    record = load_record(attempt)
    current = attempt.read_text(encoding="utf-8")
    text = record.text_at_time_up if record is not None and record.text_at_time_up is not None else current
    scene = scene_for(attempt, diagram)
    if scene.exists():
        drawing = grade_file(scene, parse(text), image_for(scene))
    else:
        rubric = load_diagram_rubric()
        drawing = DiagramGrade(str(scene), 0, rubric.points, rubric.band(0),
                               problem="no drawing: draw in Excalidraw and save the scene there")
    return RoundGrade(score_text(text, attempt=str(attempt)), drawing, observe(record, current))
