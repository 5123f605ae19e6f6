"""The alternative-architectures page: other designs given as answers, each with when it wins and how it
answers the seven hidden follow-ups, from designs/d2/alternatives.yaml (follow-up topics from the rubric)."""

from __future__ import annotations

import yaml

from d2kit import paths
from d2kit.scoring.rubric import load_design_rubric
from d2kit.site.rubric_pages import one_line, table_cell

ALTERNATIVES_FILE = paths.DESIGN_DIR / "alternatives.yaml"


def alternatives_markdown() -> str:
    raw = yaml.safe_load(ALTERNATIVES_FILE.read_text(encoding="utf-8"))
    follow_ups = load_design_rubric().follow_ups
    parts = []
    for arch in raw["architectures"]:
        if len(arch["profile"]) != len(follow_ups):
            raise ValueError(f"{arch['id']}: one profile entry per hidden follow-up is needed")
        parts += [f"## {arch['title']} {{ #{arch['id']} }}", "",
                  one_line(arch["shape"]), "",
                  f"**When it wins.** {one_line(arch['wins_when'])}", "",
                  f"**Inside.** {one_line(arch['inside'])}", "",
                  "| Follow-up | How this architecture answers it |", "|---|---|"]
        parts += [f"| [{f.number}. {f.topic}](answer-key.md#fu{f.number}) | {table_cell(answer)} |"
                  for f, answer in zip(follow_ups, arch["profile"], strict=True)]
        parts += ["", "Sources: " + "; ".join(arch["sources"]) + ".", ""]
    opposite = raw["opposite_default"]
    parts += [f"## {opposite['title']} {{ #opposite-default }}", "", one_line(opposite["text"]), "",
              f"Source: {opposite['source']}.", ""]
    return "\n".join(parts)
