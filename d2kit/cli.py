"""``d2kit``: the one console script. It assembles the command groups; each lives with what it drives.

The scheduler's own commands (``db``, ``tenant``, ``submit``, ``status``, ``executions``, ``scheduler``,
``worker``, ``up``, ``api``) come from ``reference_impl.cli``; the kit adds its tools beside them.
"""

from __future__ import annotations

import typer

from d2kit.bench.cli import bench_app, load_app
from d2kit.drills.cli import app as drill_app
from d2kit.scoring.cli import register as register_scoring
from d2kit.site.cheatsheet import register as register_cheatsheet
from d2kit.site.diagrams import app as diagram_app
from reference_impl.cli import app as scheduler_app

app = typer.Typer(
    help="D2 Kit: design a fault-tolerant distributed job scheduler -- reference implementation, "
    "failure drills, load tests, rubric and practice timer.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(scheduler_app)  # no name: its commands sit at the top level
app.add_typer(drill_app, name="drill")
app.add_typer(bench_app, name="bench")
app.add_typer(load_app, name="load")
app.add_typer(diagram_app, name="diagram")
register_scoring(app)
register_cheatsheet(app)

if __name__ == "__main__":
    app()
