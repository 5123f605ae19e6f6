"""``d2kit drill``: list the drills, run one, or run them all with a verdict table (``make demo``)."""

from __future__ import annotations

import json
import os
from typing import Any

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.table import Table

from d2kit import drills as registry

app = typer.Typer(help="Failure drills: each follow-up as a real experiment (real PostgreSQL, processes, "
                       "signals), judged by invariants on the recorded history.", no_args_is_help=True)
console = Console()

NOT_RUN_EXIT = 3  # `drill run` and `drill all`: a fault could not be injected (and nothing failed)
QUICK_HELP = "Scaled down further for CI and `make demo` (about half a minute per drill)."
JSON_HELP = "Print one JSON object (the verdict) instead of tables; progress still goes to stderr."
PUBLISH_HELP = "Also copy the report to docs/drills/reports/<name>/ for the docs site."


def _known(name: str) -> str:
    if name not in registry.DRILLS:
        raise typer.BadParameter(f"unknown drill '{name}'; known: {', '.join(registry.DRILLS)}")
    return name


@app.command("list")
def list_drills(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Every drill with the follow-up question it answers."""
    rows = []
    for name in registry.DRILLS:
        module = registry.load(name)
        rows.append({"drill": name, "follow_up": module.FOLLOW_UP, "question": registry.question(module),
                     "negative_control": registry.negative_control(module)})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title="Failure drills (d2kit drill run NAME [--quick])")
    for column in ("drill", "follow-up", "question", "negative control"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["drill"], str(row["follow_up"] or "beyond"), row["question"],
                      "yes" if row["negative_control"] else "")
    console.print(table)


@app.command("run")
def run(
    name: str = typer.Argument(..., callback=_known, help="Drill name (see `d2kit drill list`)."),
    quick: bool = typer.Option(False, "--quick", help=QUICK_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    publish: bool = typer.Option(False, "--publish", help=PUBLISH_HELP),
    negative_control: bool = typer.Option(
        False, "--negative-control",
        help="Test-only: switch off the mechanism under test (e.g. fencing) to show the invariants CAN fail. "
             "Such a run is expected to fail; its report goes to reports/drills/<name>-negative-control/."),
) -> None:
    """Run one drill; exit status 0 only when every invariant holds (3: not run, its fault could not be injected)."""
    from d2kit.drills.harness import run_drill

    result = run_drill(name, quick=quick, negative_control=negative_control, publish=publish, live=not as_json)
    if as_json:
        print(json.dumps(result, indent=2, default=str))
    else:
        _print_verdict(result)
    raise typer.Exit(_exit_status([result]))


@app.command("all")
def run_all(
    quick: bool = typer.Option(False, "--quick", help=QUICK_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object with every drill's verdict."),
    publish: bool = typer.Option(False, "--publish", help=PUBLISH_HELP),
) -> None:
    """Run every drill in follow-up order and print a verdict table; exit 0 only when every invariant of every
    drill holds (1: some failed; 3: none failed but some could not inject their fault: not run)."""
    from d2kit.drills.harness import run_drill

    if not as_json:
        console.print(f"[bold]D2 Kit failure drills[/] ({'quick' if quick else 'full'} mode): {len(registry.DRILLS)} "
                      "drills, each its own cluster of real processes on real PostgreSQL, a real fault, and "
                      "invariants checked on the recorded history. Full reports: reports/drills/<name>/.\n")
    results = []
    for name in registry.DRILLS:
        result = run_drill(name, quick=quick, publish=publish, live=not as_json)
        results.append(result)
        if not as_json:
            _print_summary(result)
    passed = all(r["passed"] for r in results)
    not_run = [r for r in results if r["not_run"]]
    if as_json:
        print(json.dumps({"passed": passed, "not_run": [r["drill"] for r in not_run], "drills": results},
                         indent=2, default=str))
    else:
        console.print(_verdict_table(results))
        failed = any(not r["passed"] and not r["not_run"] for r in results)
        if failed:
            console.print("[bold red]some invariants did not hold: see the reports above[/]")
        for r in not_run:
            console.print(f"[bold reverse yellow] NOT RUN [/] [bold yellow]{r['drill']}: {r['not_run']}. Its fault "
                          "could not be injected on this machine, so it proves nothing here.[/]")
        if passed:
            console.print("[bold green]every invariant held[/]")
    raise typer.Exit(_exit_status(results))


def _exit_status(results: list[dict[str, Any]]) -> int:
    if all(r["passed"] for r in results):
        return 0
    return NOT_RUN_EXIT if all(r["passed"] or r["not_run"] for r in results) else 1


def _verdict(result: dict[str, Any], why: bool = True) -> str:
    """The verdict in three states: passed, failed, or not run (with why, unless ``why`` is False)."""
    if result["not_run"]:
        return "[bold yellow]- NOT RUN[/]" + (f": {result['not_run']}" if why else "")
    return "[bold green]✓ PASSED[/]" if result["passed"] else "[bold red]✗ FAILED[/]"


def _print_verdict(result: dict[str, Any]) -> None:
    mark = _verdict(result)
    source = f"follow-up {result['follow_up']}" if result["follow_up"] else "beyond the follow-ups"
    table = Table(title=f"{result['drill']} ({source}, {result['mode']}): {mark}",
                  title_justify="left", show_lines=False)
    table.add_column("", width=2)
    table.add_column("invariant (from the database's history)", overflow="fold", ratio=3)
    table.add_column("observed", overflow="fold", ratio=2)
    for inv in result["invariants"]:
        observed = json.dumps(inv["observed"], default=str)
        table.add_row("[green]✓[/]" if inv["holds"] else "[red]✗[/]", inv["name"],
                      observed if len(observed) < 240 else observed[:240] + " …")
    console.print(table)
    if result["scaled"]:
        console.print("scaled: " + "; ".join(f"{k}: {v}" for k, v in result["scaled"].items()))
    for note in result.get("notes", []):
        console.print(Markdown(note))
    console.print(f"report: {_shown(result['report'])}  ({result['duration_s']} s)\n")


def _print_summary(result: dict[str, Any]) -> None:
    """One line per drill in `drill all`; the invariants that failed, if any, spelled out."""
    held = sum(i["holds"] for i in result["invariants"])
    console.print(f"{_verdict(result, why=False)} [bold]{result['drill']}[/]: "
                  + (f"{result['not_run']} " if result["not_run"] else "")
                  + f"{held}/{len(result['invariants'])} invariants held ({result['duration_s']} s) -- "
                  f"{_shown(result['report'])}")
    for inv in result["invariants"]:
        if not inv["holds"]:
            console.print(f"    [red]✗[/] {inv['name']}: {json.dumps(inv['observed'], default=str)[:300]}")


def _shown(path: str) -> str:
    """A report path as short as it can be from here."""
    return os.path.relpath(path) if path.startswith(os.getcwd()) else path


def _verdict_table(results: list[dict[str, Any]]) -> Table:
    table = Table(title="Verdicts")
    for column in ("follow-up", "drill", "verdict", "invariants held", "time"):
        table.add_column(column, no_wrap=column != "verdict", overflow="fold")
    for r in results:
        held = sum(i["holds"] for i in r["invariants"])
        table.add_row(str(r["follow_up"] or "beyond"), r["drill"], _verdict(r), f"{held}/{len(r['invariants'])}",
                      f"{r['duration_s']} s")
    table.caption = "each drill's report.md, report.json and timeline.svg: reports/drills/<drill>/"
    return table


@app.command("mutants")
def mutants(
    names: list[str] = typer.Argument(None, help="Only these mutations (default: all); their rows of the "
                                                 "published table are replaced."),
    as_json: bool = typer.Option(False, "--json", help="Print the result table as JSON."),
    list_only: bool = typer.Option(False, "--list", help="List the mutations and what must catch each; run nothing."),
) -> None:
    """Mutation testing: break each guarantee on purpose, one realistic bug at a time, in a scratch copy, and check
    that the drill (quick mode) or test named for it catches it. The results go to docs/drills/mutants.json,
    which the drills page renders. Exit 0 only when every mutation run was caught.
    Takes about a minute per mutation (`make mutants`)."""
    from rich.progress import Progress

    from d2kit.drills import mutants as mutation_testing
    from reference_impl import db

    unknown = [n for n in names or [] if n not in mutation_testing.BY_NAME]
    if unknown:
        raise typer.BadParameter(f"unknown mutation(s) {', '.join(unknown)}; known: "
                                 f"{', '.join(mutation_testing.BY_NAME)}")
    chosen = [mutation_testing.BY_NAME[n] for n in names] if names else list(mutation_testing.MUTATIONS)
    if list_only:
        table = Table(title="Mutations (d2kit drill mutants [NAME ...])")
        for column in ("mutation", "guarantee", "the bug", "must be caught by"):
            table.add_column(column, overflow="fold")
        for m in chosen:
            table.add_row(m.name, m.guarantee, m.bug, m.catcher)
        console.print(table)
        return
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("mutants", total=len(chosen))

        def report(mutation, result) -> None:
            if result is None:
                progress.update(task, description=f"{mutation.name} ({mutation.catcher[:60]})")
                return
            progress.advance(task)
            progress.console.print(("[green]caught[/]" if result["caught"] else "[red]NOT CAUGHT[/]")
                                   + f" {mutation.name}: {'; '.join(result['caught_by'])[:200]}")
        results = mutation_testing.table(mutation_testing.run_all(chosen, db.database_url(), report))
    published = mutation_testing.publish(results["mutations"])
    if as_json:
        print(json.dumps(results, indent=2))
    else:
        table = Table(title=f"Mutants: {results['caught']} / {results['total']} caught")
        for column in ("mutation", "guarantee", "caught", "by (failed invariants, or the test)"):
            table.add_column(column, overflow="fold")
        for r in results["mutations"]:
            table.add_row(r["mutation"], r["guarantee"], "[green]yes[/]" if r["caught"] else "[red]NO[/]",
                          "; ".join(r["caught_by"]))
        console.print(table)
        console.print(f"written: {_shown(str(mutation_testing.RESULTS))} ({published['caught']} / "
                      f"{published['total']} caught of {len(mutation_testing.MUTATIONS)} mutations)")
    raise typer.Exit(0 if results["caught"] == results["total"] else 1)
