"""The same content scores the same whatever the layout: tuning attempts rewritten mechanically
(d2kit/scoring/layouts.py), the total within 3 points across the layouts."""

from __future__ import annotations

import pytest

from d2kit.scoring.calibration import CALIBRATION_DIR
from d2kit.scoring.layouts import MIN_ITEMS, TOLERANCE, list_items, rewrite, totals

TUNING = CALIBRATION_DIR / "tuning"


def test_the_rewrite_keeps_the_words():
    text = "## 7. Failures\n- **Worker dies.** Detection: lease expiry.\n  - nested detail\n- Second item\n"
    assert rewrite(text, "numbered") == ("## 7. Failures\n1. **Worker dies.** Detection: lease expiry. nested detail\n"
                                         "2. Second item\n")
    assert "| Second item |" in rewrite(text, "table")
    assert "\nSecond item.\n" in rewrite(text, "one-per-line")


def _listed() -> list[str]:
    """The tuning attempts written partly as lists, whatever bands.yaml holds: their items are what a layout changes."""
    return [path.name for path in sorted(TUNING.glob("*.md"))
            if list_items(path.read_text(encoding="utf-8")) >= MIN_ITEMS]


def test_most_tuning_attempts_have_lists_to_rewrite():
    assert len(_listed()) >= len(list(TUNING.glob("*.md"))) // 2


@pytest.mark.parametrize("name", _listed())
def test_layout_does_not_change_the_total(name: str):
    scored = totals((TUNING / name).read_text(encoding="utf-8"))
    assert max(scored.values()) - min(scored.values()) <= TOLERANCE, scored
