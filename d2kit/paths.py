"""Where the kit's files are: the one place the repository root is computed.

The kit (drills, bench, scorer, site) reads and writes files of the repository it was installed from
(`pip install -e .`); the scheduler itself (`reference_impl/`) needs none of them.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DESIGN_DIR = ROOT / "designs" / "d2"
DIAGRAM_DIR = DESIGN_DIR / "diagrams"
SCALE_FILE = DESIGN_DIR / "scale.yaml"
RUBRIC_DIR = ROOT / "rubric"
LOAD_DIR = ROOT / "load"
LOAD_RESULTS_DIR = LOAD_DIR / "results"
PEER_RUNNER = LOAD_DIR / "peers" / "peer_runner.py"
BENCH_ENV = ROOT / ".venv-bench"
DRILL_REPORTS_DIR = ROOT / "reports" / "drills"          # every run's full report (git-ignored)
DRILL_PUBLISH_DIR = ROOT / "docs" / "drills" / "reports"  # the reports the site shows
NODE_BIN = ROOT / "node_modules" / ".bin"
