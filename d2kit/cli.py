"""``d2kit``: the one console script. It assembles the command groups; each lives with what it drives.

The scheduler's own commands (``db``, ``tenant``, ``submit``, ``status``, ``executions``, ``scheduler``,
``worker``, ``up``, ``api``) come from ``reference_impl.cli``; the kit adds its tools beside them.

Only the rubric's commands are imported up front. The others are imported when one of them is asked for, or
when a listing needs them all (``d2kit --help``): scoring an attempt should not pay for SQLAlchemy, the drills
and the benchmarks (``d2kit bench score`` times it).
"""

from __future__ import annotations

from importlib import import_module

import click
import typer
from typer.core import TyperGroup

from d2kit.scoring.cli import register as register_scoring

# (module, attribute, name): a Typer app added under ``name``, or its commands at the top level when name is None.
LAZY_APPS = (
    ("reference_impl.cli", "app", None),
    ("d2kit.drills.cli", "app", "drill"),
    ("d2kit.bench.cli", "bench_app", "bench"),
    ("d2kit.bench.cli", "load_app", "load"),
    ("d2kit.site.diagrams", "app", "diagram"),
)
LAZY_REGISTERS = ("d2kit.site.cheatsheet",)  # modules whose register(app) adds top-level commands


class KitCommands(TyperGroup):
    """The main group: commands beyond the eagerly registered ones are loaded on first need."""

    def _load_all(self) -> None:
        if getattr(self, "_loaded", False):
            return
        self._loaded = True
        extra = typer.Typer()
        for module in LAZY_REGISTERS:
            import_module(module).register(extra)
        for module, attribute, name in LAZY_APPS:
            extra.add_typer(getattr(import_module(module), attribute), name=name)
        group = typer.main.get_group(extra)
        for command_name, command in group.commands.items():
            self.commands.setdefault(command_name, command)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_all()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None:
            self._load_all()
            command = super().get_command(ctx, cmd_name)
        return command


app = typer.Typer(
    cls=KitCommands,
    help="D2 Kit: design a fault-tolerant distributed job scheduler -- reference implementation, "
    "failure drills, load tests, rubric and practice timer.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
register_scoring(app)

if __name__ == "__main__":
    app()
