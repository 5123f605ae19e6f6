"""``d2kit load`` (Locust against the HTTP API; the stated-vs-measured check) and ``d2kit bench`` (benchmarks)."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from d2kit import capacity

console = Console()
# The design's peak, executions/s: the rate the parts offer. scenarios.PEAK_RATE is the same for peers.py; scenarios
# is imported only when a part runs, so that `d2kit --help` stays light.
PEAK_RATE = capacity.peak_rate()
load_app = typer.Typer(help="Load tests: Locust drives the real HTTP API while a cluster runs; check stated vs "
                            "measured.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks on this machine: sustained peak, maximum rate and where the time goes there, "
                             "drain, batch curve, held snapshot, table size, history and retention, and the peers "
                             "(pgqueuer, procrastinate).", no_args_is_help=True)

PARTS = ("sustained", "drain", "batch_curve", "max_rate", "profile", "poll_period", "held_snapshot", "scale", "history",
         "spike", "skipped_rows", "peers")
PROFILE_RATE_WITHOUT_MAX_RATE = 2_000.0  # the profile runs at the measured maximum rate; this until there is one


SKIPPED_PER_JOB = 119  # a 2-hour outage of a per-minute cron under run_once: all missed times but the last


@dataclass(frozen=True)
class Plan:
    """How long each part runs. ``full`` is what the goals are judged on; ``quick`` checks the pipeline."""
    sustained_seconds: float
    backlog: int
    drain_rounds: int
    curve_batches: tuple[int, ...]
    curve_workers: tuple[int, ...]
    curve_backlog: int
    rates: tuple[float, ...]
    step_seconds: float
    hold_after_seconds: float
    hold_seconds: float
    hold_total_seconds: float
    scale_small: int
    scale_large: int
    scale_history: int
    scale_backlog: int
    history_seconds: float
    history_archive_after_seconds: float
    history_rows: int
    peer_rounds: int
    peer_lag_seconds: float
    peer_saturate_seconds: float
    peer_backlog: int
    spike_jobs: int
    spike_spread_seconds: int
    skipped_jobs: int
    profile_seconds: float
    poll_variants: tuple[tuple[float, float | None], ...]  # (poll period, claim-ahead window; None = the default)
    poll_seconds_each: float
    poll_rounds: int


# The maximum rate's last step is the goal itself, ten times the peak (check.MAX_RATE_OVER_PEAK): a step of 8,000/s
# could not show it met.
FULL = Plan(sustained_seconds=300, backlog=50_000, drain_rounds=3, curve_batches=(1, 8, 32, 64),
            curve_workers=(1, 2, 4), curve_backlog=10_000,
            rates=(1_000, 2_000, 3_000, 4_000, 5_000, 6_000, 7_000, 10 * PEAK_RATE),
            step_seconds=20, hold_after_seconds=30, hold_seconds=300, hold_total_seconds=480, scale_small=10_000,
            scale_large=10_000_000, scale_history=1_000_000, scale_backlog=20_000, history_seconds=300,
            history_archive_after_seconds=10, history_rows=1_000_000, peer_rounds=3,
            peer_lag_seconds=30, peer_saturate_seconds=20, peer_backlog=20_000, spike_jobs=50_000,
            spike_spread_seconds=60, skipped_jobs=40_000, profile_seconds=60,
            # 50 ms is the worker's own default (reference_impl/cli.py) and the bench's (harness.ClusterShape). Each
            # claims ahead by default; the last row is the control without it.
            poll_variants=((0.005, None), (0.01, None), (0.02, None), (0.05, None), (0.05, 0.0)),
            poll_seconds_each=45, poll_rounds=3)
QUICK = Plan(sustained_seconds=15, backlog=5_000, drain_rounds=1, curve_batches=(1, 64), curve_workers=(1, 2),
             curve_backlog=2_000, rates=(PEAK_RATE, 2_000), step_seconds=8, hold_after_seconds=5, hold_seconds=8,
             hold_total_seconds=20, scale_small=1_000, scale_large=100_000, scale_history=10_000,
             scale_backlog=2_000, history_seconds=15, history_archive_after_seconds=2, history_rows=20_000,
             peer_rounds=1, peer_lag_seconds=8, peer_saturate_seconds=6, peer_backlog=2_000, spike_jobs=2_000,
             spike_spread_seconds=10, skipped_jobs=2_000, profile_seconds=8,
             poll_variants=((0.005, None), (0.05, None), (0.05, 0.0)), poll_seconds_each=8, poll_rounds=1)


@contextmanager
def _progress() -> Iterator[Callable[[str], None]]:
    # SIGTERM must unwind like Ctrl-C, so every rig stops its processes and drops its scratch database.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=True) as bar:
        task = bar.add_task("starting")
        yield lambda message: bar.update(task, description=message)


def run_parts(parts: list[str], plan: Plan, progress: Callable[[str], None]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Run the chosen parts in a fixed order, yielding (part, {figure: result}) as each finishes (so each is saved
    even if a later one fails)."""
    from d2kit.bench import history, peers, results, scale, scenarios, skipped, spike
    from d2kit.bench.harness import ClusterShape

    shape = ClusterShape()
    if "sustained" in parts:
        yield "sustained", {"sustained": scenarios.sustained(shape, PEAK_RATE, plan.sustained_seconds,
                                                             with_series=True, progress=progress)}
    if "drain" in parts:
        yield "drain", {"drain": scenarios.drain(shape, plan.backlog, progress=progress, rounds=plan.drain_rounds)}
    if "batch_curve" in parts:
        curve = scenarios.batch_curve(shape, list(plan.curve_batches), list(plan.curve_workers), plan.curve_backlog,
                                      progress=progress)
        one = [p["executions_per_second"] for p in curve if p["workers"] == 1]
        yield "batch_curve", {"batch_curve": curve, "per_worker_process_per_second": max(one) if one else None}
    if "max_rate" in parts:
        found = scenarios.max_rate(shape, list(plan.rates), plan.step_seconds, progress=progress)
        yield "max_rate", {"max_rate": found}
    if "profile" in parts:  # where the time goes at the maximum rate: CPU per component, functions, Python stacks
        rate = (found if "max_rate" in parts else results.latest().get("bench", {}).get("max_rate") or {}).get(
            "max_sustainable_per_second") or PROFILE_RATE_WITHOUT_MAX_RATE
        yield "profile", {"profile": scenarios.sustained(shape, rate, plan.profile_seconds, with_profile=True,
                                                         progress=progress)}
    if "poll_period" in parts:
        yield "poll_period", {"poll_period": scenarios.poll_period(shape, list(plan.poll_variants), PEAK_RATE,
                                                                   plan.poll_seconds_each, plan.poll_rounds,
                                                                   progress=progress)}
    if "held_snapshot" in parts:
        snapshot = scenarios.HeldSnapshot(after_seconds=plan.hold_after_seconds, hold_seconds=plan.hold_seconds)
        yield "held_snapshot", {"held_snapshot": scenarios.sustained(shape, PEAK_RATE,
                                                                     plan.hold_total_seconds, snapshot=snapshot,
                                                                     progress=progress)}
    if "scale" in parts:
        yield "scale", {"scale": scale.compare(shape, plan.scale_small, plan.scale_large, plan.scale_history,
                                               plan.scale_backlog, progress=progress)}
    if "history" in parts:
        yield "history", {"history": {
            "at_peak": history.at_peak(shape, PEAK_RATE, plan.history_seconds,
                                       plan.history_archive_after_seconds, progress=progress),
            "retention": history.retention(plan.history_rows, shape.tenants, progress=progress)}}
    if "spike" in parts:
        yield "spike", {"spike": spike.compare(shape, plan.spike_jobs, plan.spike_spread_seconds, progress=progress)}
    if "skipped_rows" in parts:  # the catch-up storm's run_once: a 2-hour outage of per-minute crons
        yield "skipped_rows", {"skipped_rows": skipped.compare(plan.skipped_jobs, SKIPPED_PER_JOB, progress=progress)}
    if "peers" in parts:
        yield "peers", {"peers": peers.compare(shape, plan.peer_rounds, plan.peer_lag_seconds,
                                               plan.peer_saturate_seconds, plan.peer_backlog, progress=progress)}


def measure(parts: list[str], quick: bool, save: bool,
            progress: Callable[[str], None]) -> dict[str, Any]:
    """Run the parts, each with the machine's load before and during it; merge each into the bench section as it
    finishes (each figure keeps its own stamp). Returns the figures measured."""
    from d2kit.bench import machine_load, results

    measured: dict[str, Any] = {}
    for part, figures, load in machine_load.watched(run_parts(parts, QUICK if quick else FULL, progress)):
        measured.update(figures)
        if not save:
            continue
        bench = dict(results.latest().get("bench") or {})
        stamped = results.stamp({"mode": "quick" if quick else "full"})
        for figure, value in figures.items():
            bench[figure] = value
            bench.setdefault("parts", {})[figure] = {
                **{k: stamped[k] for k in ("measured_at", "command", "mode", "code", "code_digest")},
                "part": part, "machine_load": load}
        bench.update({k: stamped[k] for k in ("measured_at", "command", "code", "machine", "database")})
        results.write("bench", bench, series=(figures.get("sustained") or {}).get("series"))
    return measured


@bench_app.command("run")
def bench_run(
    quick: bool = typer.Option(False, "--quick", help="Seconds per part instead of minutes: checks the pipeline, "
                                                      "proves nothing about the goals (~4 minutes in all)."),
    only: str = typer.Option(",".join(PARTS), help=f"Comma-separated parts to run: {', '.join(PARTS)}."),
    save: bool = typer.Option(True, "--save/--no-save", help="Merge the results into load/results/latest.json."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Run the benchmarks (full: about an hour on 2 cores; --quick: a few minutes) and record the results.

    Every part starts a fresh scratch database and real scheduler/worker processes; numbers are read back from
    the recorded history. Parts run one after another, never two at once, on the embedded PostgreSQL (or
    DATABASE_URL)."""
    parts = [p.strip() for p in only.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        console.print(f"[red]error:[/] unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
        raise typer.Exit(2)
    with _progress() as progress:
        measured = measure(parts, quick, save, progress)
    if as_json:
        print(json.dumps(measured, indent=2, default=str))
    else:
        _print_check()


@bench_app.command("peers")
def bench_peers(
    quick: bool = typer.Option(False, "--quick", help="One short round instead of three (~3 minutes)."),
    save: bool = typer.Option(True, "--save/--no-save", help="Merge into load/results/latest.json."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
) -> None:
    """Ours vs pgqueuer vs procrastinate on the same PostgreSQL, alternating rounds, medians (creates .venv-bench/
    with pip on first use)."""
    with _progress() as progress:
        measured = measure(["peers"], quick, save, progress)
    if as_json:
        print(json.dumps(measured["peers"], indent=2, default=str))
    else:
        _print_peers(measured["peers"])


@bench_app.command("score")
def bench_score(
    runs: int = typer.Option(10, min=1, help="Timed runs, alternating between the two tuning attempts nearest "
                                             "1,500 words (after one untimed warm-up)."),
    save: bool = typer.Option(True, "--save/--no-save", help="Write rubric/calibration/score-speed.json, which "
                                                             "the rubric page renders."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """How long `d2kit score` takes on a 1,500-word attempt, each run a new process: min, median and max against
    the 2 s goal. Run it with the machine otherwise idle."""
    from d2kit.bench import score_speed

    with _progress() as progress:
        figures = score_speed.measure(runs, progress)
    if save:
        console.print(f"Recorded in {score_speed.save(figures)}")
    if as_json:
        print(json.dumps(figures, indent=2))
    else:
        spread = figures["seconds"]
        console.print(f"d2kit score, {figures['runs']} runs: median {spread['median']:g} s (min {spread['min']:g} s, "
                      f"max {spread['max']:g} s); goal under {figures['goal_seconds']:g} s")


def _print_peers(peers: dict[str, Any]) -> None:
    table = Table(title=f"Medians of {peers['rounds']} alternating round(s) -- {peers['method']}")
    for col in ("system", "sustained exec/s", f"p99 lag ms at {PEAK_RATE}/s", "drain exec/s"):
        table.add_column(col, justify="right")
    for system, m in peers["medians"].items():
        table.add_row(system, str(m["sustained"]), str(m["p99_lag_ms_at_833"]), str(m["drain"]))
    console.print(table)
    for peer, ratios in peers["ratio_ours_over_theirs"].items():
        console.print(f"ours / {peer}: " + ", ".join(f"{k} {v}x" for k, v in ratios.items()))


@load_app.command("run")
def load_run(
    seconds: float = typer.Option(60, min=5, help="Length of each Locust scenario."),
    users: int = typer.Option(20, min=1, help="Concurrent Locust users for the API scenario."),
    max_requests: int = typer.Option(200_000, min=1, help="Hard cap on requests per scenario."),
    save: bool = typer.Option(True, "--save/--no-save", help="Write load/results/latest.json and Locust's files."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Headless Locust on 127.0.0.1 against `d2kit api` while schedulers and workers run: the API scenario
    (tenants submit one-shot jobs and read occurrences), then the cron scenario (recurring jobs adding up to
    the design's 833 executions/s). Bounded in time and request count; writes CSV/HTML under load/results/."""
    from d2kit.bench import loadtest, results

    with _progress() as progress:
        measured = loadtest.run(seconds=seconds, users=users, max_requests=max_requests, save=save,
                                progress=progress)
    if save:
        results.write("load", results.stamp(measured), series=measured.pop("series", None))
    if as_json:
        print(json.dumps(measured, indent=2, default=str))
    else:
        _print_check()


@load_app.command("check")
def load_check(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 also when a row was not measured."),
) -> None:
    """Every number the design states (designs/d2/scale.yaml) next to the latest measurement, with pass/fail.

    Exits 1 when a stated goal fails or a measurement is stale (taken on code that has changed since)."""
    from d2kit.bench import check, results

    table = check.rows(results.latest())
    if as_json:
        print(json.dumps(check.as_dicts(table), indent=2))
    else:
        _print_check(table)
    raise typer.Exit(check.exit_status(table, strict))


def _print_check(table=None) -> None:
    from d2kit.bench import check, results

    data = results.latest()
    table = table if table is not None else check.rows(data)
    view = Table(title="Stated vs measured (designs/d2/scale.yaml vs load/results/latest.json)")
    for col in ("figure", "stated", "measured", "verdict"):
        view.add_column(col, overflow="fold")
    colour = {"pass": "green", "FAIL": "red"}
    for row in table:
        stale = f"\n[yellow]stale: {row.stale}[/]" if row.stale else ""
        view.add_row(row.figure, row.stated, row.measured,
                     f"[{colour.get(row.verdict, 'yellow')}]{row.verdict}[/]{stale}")
    console.print(view)
    for kind in ("bench", "load"):
        section = data.get(kind) or {}
        if section:
            console.print(f"[dim]{kind}: measured {section.get('measured_at')} with `{section.get('command')}` on "
                          f"{section.get('machine', {}).get('cores')} cores[/]")
