"""One-off: split the independently written calibration diagrams into a tuning half and a held-out half.

Run once, before any diagram is opened:

    python -m d2kit.scoring.calibration_split /tmp/diag-calib-out

The sorted file names are shuffled with a fixed seed; the first half is for tuning, the second is held out
and scored once, at the end. Each half gets its own bands.yaml (the bands as the author wrote them, before
any scoring) recording the seed and the split, so the split can be checked and never quietly redone.
"""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

import yaml

from d2kit import paths

SEED = 20261201
DIAGRAMS_DIR = paths.RUBRIC_DIR / "calibration" / "diagrams"
HALVES = ("tuning", "heldout")


def split(names: list[str], seed: int = SEED) -> tuple[list[str], list[str]]:
    shuffled = sorted(names)
    random.Random(seed).shuffle(shuffled)
    half = len(shuffled) // 2
    return sorted(shuffled[:half]), sorted(shuffled[half:])


def main(source: Path, target: Path = DIAGRAMS_DIR) -> None:
    bands = yaml.safe_load((source / "bands.yaml").read_text(encoding="utf-8"))["diagrams"]
    names = sorted(p.name for p in source.glob("*.excalidraw"))
    if sorted(bands) != names:
        raise SystemExit(f"bands.yaml and the .excalidraw files disagree: {sorted(set(bands) ^ set(names))}")
    if any((target / half).exists() for half in HALVES):
        raise SystemExit(f"{target} is already split; the split is done once")
    tuning, heldout = split(names)
    for half, members in zip(HALVES, (tuning, heldout), strict=True):
        directory = target / half
        directory.mkdir(parents=True)
        for name in members:
            stem = name.removesuffix(".excalidraw")
            shutil.copy2(source / name, directory / name)
            shutil.copy2(source / f"{stem}.section5.md", directory / f"{stem}.section5.md")
        record = {"seed": SEED, "half": half, "split": {"tuning": tuning, "heldout": heldout},
                  "method": "random.Random(seed).shuffle(sorted names); first half tuning, second held out",
                  "diagrams": {name: bands[name] for name in members}}
        (directory / "bands.yaml").write_text(yaml.safe_dump(record, sort_keys=False, allow_unicode=True),
                                              encoding="utf-8")
        print(f"{half}: {', '.join(members)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
