"""What every drill shares: a scratch database, a local cluster of real processes, phases and fault windows on
the database clock, invariant records, the ``scaled`` note, the live view, and the run that writes the report.

A drill module provides ``run(drill: Drill)``; ``run_drill`` does the rest:

1. a fresh database on the server (``db.create_scratch_database``) with the schema, and a ``LocalCluster``
   whose processes log to ``reports/drills/<name>/logs/``;
2. the drill starts processes, injects its fault, runs its workload and records invariants read from the
   database's history;
3. the cluster is stopped, the history is read once more for the timeline, the report is written
   (report.py) and the database dropped.

A drill that crashes or times out is a failed drill (an invariant "the drill ran to the end" that does not
hold), never a silent pass. A drill that cannot inject its fault on this machine calls ``drill.not_run(why)``:
its verdict is the third state, "not run: why" -- never PASSED without the fault.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from sqlalchemy import Engine, text

from d2kit import drills as registry
from d2kit import paths
from d2kit.drills.invariants import Invariant
from reference_impl import db
from reference_impl.cluster import LocalCluster

REPORTS_DIR = paths.DRILL_REPORTS_DIR
PUBLISH_DIR = paths.DRILL_PUBLISH_DIR
STOP_TIMEOUT_SECONDS = 3.0  # the drill is over: whoever has not stopped by then is SIGKILLed


class DrillError(Exception):
    """The drill could not carry out a step (a wait timed out, a process did not start)."""


class NotRun(Exception):
    """The drill's fault cannot be injected here; the message says why."""


@dataclass
class Window:
    """A phase or a fault, on the database clock. ``end`` is None for an instant (a SIGKILL)."""
    label: str
    start: datetime
    end: datetime | None = None


@dataclass
class Series:
    """A measured value over time, drawn under the timeline (e.g. claim latency), with an optional limit line."""
    label: str
    unit: str
    points: list[tuple[datetime, float]] = field(default_factory=list)
    limit: float | None = None


@dataclass
class Drill:
    name: str
    quick: bool
    negative_control: bool
    url: str
    engine: Engine
    cluster: LocalCluster
    report_dir: Path
    invariants: list[Invariant] = field(default_factory=list)
    scaled: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    sections: list[tuple[str, str]] = field(default_factory=list)
    phases: list[Window] = field(default_factory=list)
    faults: list[Window] = field(default_factory=list)
    marks: list[Window] = field(default_factory=list)  # moments worth a line on the timeline, not faults
    series: list[Series] = field(default_factory=list)
    focus: list[int] = field(default_factory=list)  # occurrence ids the timeline should show
    rate_line: float | None = None                   # a dispatches/s limit to draw on the timeline
    live_stats: bool = True                          # the live view counts occurrences (off for huge tables)
    show_lanes: bool = True                          # worker lanes on the timeline (off when no worker ran)

    def __post_init__(self) -> None:
        self.started_at = self.db_clock()
        self._mono_start = time.monotonic()
        self.phase_label = "starting"

    # -- clock -------------------------------------------------------------------------------------
    def db_clock(self) -> datetime:
        with self.engine.connect() as conn:
            return conn.execute(text("SELECT clock_timestamp()")).scalar_one()

    def now(self) -> datetime:
        """The database clock, without a round trip (it may be down): start time + elapsed monotonic time."""
        return self.started_at + timedelta(seconds=time.monotonic() - self._mono_start)

    def elapsed(self) -> float:
        return time.monotonic() - self._mono_start

    # -- what happened ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, label: str) -> Iterator[None]:
        window = Window(label, self.now())
        self.phases.append(window)
        self.phase_label = label
        _say(f"[{self.name}] {self.elapsed():6.1f}s  {label}")
        try:
            yield
        finally:
            window.end = self.now()

    @contextlib.contextmanager
    def fault(self, label: str) -> Iterator[Window]:
        window = Window(label, self.now())
        self.faults.append(window)
        try:
            yield window
        finally:
            window.end = self.now()

    def fault_instant(self, label: str) -> None:
        self.faults.append(Window(label, self.now()))

    def mark(self, label: str, at: datetime) -> None:
        self.marks.append(Window(label, at))

    def not_run(self, why: str) -> None:
        """Stop here: the fault cannot be injected on this machine, so no verdict can be given."""
        raise NotRun(why)

    def check(self, name: str, holds: bool, observed: Any) -> None:
        self.invariants.append(Invariant(name, bool(holds), observed))

    def add(self, *invariants: Invariant) -> None:
        self.invariants.extend(invariants)

    def scale(self, what: str, scaled_to: str) -> None:
        self.scaled[what] = scaled_to

    # -- database helpers ---------------------------------------------------------------------------
    def rows(self, sql: str, **params) -> list[Any]:
        with self.engine.begin() as conn:
            return conn.execute(text(sql), params).all()

    def scalar(self, sql: str, **params) -> Any:
        with self.engine.begin() as conn:
            return conn.execute(text(sql), params).scalar()

    def wait_for(self, what: str, condition: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
        """Poll ``condition`` until truthy; a timeout is a DrillError naming ``what``."""
        value, last_error = self.poll(condition, timeout, every)
        if not value:
            raise DrillError(f"timed out after {timeout:g}s waiting for {what}"
                             + (f" (last error: {last_error})" if last_error else ""))
        return value

    @staticmethod
    def poll(condition: Callable[[], Any], timeout: float, every: float = 0.2) -> tuple[Any, Exception | None]:
        """Poll ``condition`` until truthy or ``timeout``; return its last value (and the last error, if any) --
        for a wait whose timing out is an invariant's failure, not the drill's."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value, last_error = condition(), None
            except Exception as exc:  # the database may be restarting under a drill: keep polling
                value, last_error = None, exc
            if value or time.monotonic() > deadline:
                return value, last_error
            time.sleep(every)

    def settle(self, timeout: float, at_least: int = 1) -> None:
        """Wait until at least ``at_least`` occurrences exist and none is waiting, ready or running: the history
        is complete."""
        self.wait_for(f"at least {at_least} occurrences, all in a terminal state", lambda: self.scalar(
            "SELECT count(*) >= :n AND count(*) FILTER (WHERE state IN ('waiting', 'ready', 'running')) = 0"
            " FROM occurrences", n=at_least), timeout)

    def stop_schedules(self, timeout: float) -> datetime:
        """Pause every job, settle, and return the end of the window every cursor has passed: fire times up to it
        are complete (the start of the window is the drill's)."""
        with self.engine.begin() as conn:
            conn.execute(text("UPDATE jobs SET paused = true"))
            end = conn.execute(text("SELECT min(materialized_through) FROM jobs")).scalar_one()
        self.settle(timeout)
        return end

    def kill_mid_transaction(self, member: str, timeout: float) -> bool:
        """SIGKILL a scheduler replica the moment it is inside a transaction (materialising or reaping), as
        pg_stat_activity shows it; if it is not caught in one within ``timeout``, kill it anyway. Returns
        whether the kill landed mid-transaction (the evidence that the crash was the interesting kind)."""
        deadline = time.monotonic() + timeout
        caught = False
        with self.engine.connect() as conn:
            while not caught and time.monotonic() < deadline:
                caught = bool(conn.execute(MID_TRANSACTION_SQL, {"app": f"d2-scheduler-{member}"}).scalar())
                conn.rollback()  # each probe reads a fresh pg_stat_activity snapshot
                time.sleep(0 if caught else 0.002)
        self.cluster.kill(member)
        self.fault_instant(f"SIGKILL {member}" + (" mid-transaction" if caught else ""))
        return caught

    def alive_count(self) -> tuple[int, int]:
        alive = self.cluster.alive()
        return sum(alive.values()), len(alive)


MID_TRANSACTION_SQL = text(
    "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = :app AND xact_start IS NOT NULL"
    " AND state IN ('active', 'idle in transaction')")


def _say(line: str) -> None:
    """Progress on stderr: stdout belongs to the verdict (or the JSON)."""
    if not _Live.active:
        print(line, file=sys.stderr, flush=True)


# -- the live view ------------------------------------------------------------------------------------
LIVE_STATS_SQL = text("""
    SELECT count(*) FILTER (WHERE state = 'succeeded') AS done,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE state IN ('ready', 'waiting') AND ready_at <= now()) AS due,
           count(*) FILTER (WHERE state = 'dead') AS dead,
           count(*) FILTER (WHERE state = 'skipped') AS skipped,
           (SELECT count(*) FROM attempts WHERE state = 'lost') AS lost_attempts,
           (SELECT count(*) FROM fence_rejections) AS fence_rejections
    FROM occurrences""")


class _Live:
    """Phase, processes alive, occurrences done/lost/dead -- refreshed from the database twice a second.
    Shown only on a terminal; elsewhere the phase lines on stderr are the progress."""
    active = False

    def __init__(self, drill: Drill, enabled: bool):
        self.drill = drill
        self.enabled = enabled and sys.stderr.isatty()
        self.stats: dict[str, Any] | None = None
        self.polled = False
        self.stop = threading.Event()
        self.stats_engine = db.make_engine(drill.url, pool_size=1, application_name="d2-drill-live")

    def __enter__(self) -> _Live:
        if self.enabled:
            _Live.active = True
            self.live = Live(self._render(), console=Console(stderr=True), refresh_per_second=4, transient=True)
            self.live.__enter__()
            self.thread = threading.Thread(target=self._poll, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.stop.set()
            self.thread.join(timeout=5)
            self.live.__exit__(None, None, None)
            _Live.active = False
        self.stats_engine.dispose()

    def _poll(self) -> None:
        while not self.stop.wait(0.5):
            if self.drill.live_stats:
                try:
                    with self.stats_engine.connect() as conn:
                        self.stats = dict(conn.execute(LIVE_STATS_SQL).mappings().one())
                except Exception:
                    self.stats = None  # shown as "database unreachable" (postgres-restart does this on purpose)
                self.polled = True
            self.live.update(self._render())

    def _render(self) -> Group:
        drill = self.drill
        alive, total = drill.alive_count()
        head = Table.grid(padding=(0, 2))
        head.add_row(f"[bold]{drill.name}[/] ({'quick' if drill.quick else 'full'})",
                     f"phase: [cyan]{drill.phase_label}[/]", f"{drill.elapsed():5.1f}s")
        members = Table.grid(padding=(0, 1))
        members.add_row(f"processes alive {alive}/{total}:", " ".join(
            f"[green]{name}[/]" if up else f"[red]{name}✗[/]" for name, up in drill.cluster.alive().items()))
        parts: list[Any] = [head, members]
        if drill.live_stats:
            counts = Table(box=None, padding=(0, 2))
            for column in ("done", "running", "due", "lost attempts", "dead", "skipped", "fence rejections"):
                counts.add_column(column, justify="right")
            if self.stats is None:
                counts.add_row("[yellow]database unreachable[/]" if self.polled else "…", *[""] * 6)
            else:
                s = self.stats
                counts.add_row(*(str(s[k]) for k in ("done", "running", "due", "lost_attempts", "dead", "skipped",
                                                      "fence_rejections")))
            parts.append(counts)
        if drill.faults:
            parts.append(f"faults: {', '.join(f.label for f in drill.faults[-3:])}")
        return Group(*parts)


# -- running one drill --------------------------------------------------------------------------------
def report_dir_for(name: str, negative_control: bool) -> Path:
    return REPORTS_DIR / (f"{name}-negative-control" if negative_control else name)


def run_drill(name: str, *, quick: bool, negative_control: bool = False, publish: bool = False,
              live: bool = True) -> dict[str, Any]:
    """Run one drill end to end; return the verdict object (the --json output)."""
    from d2kit.drills import report, timeline  # the renderers are only needed at the end

    module = registry.load(name)
    if negative_control and not registry.negative_control(module):
        raise ValueError(f"drill {name} has no negative control")
    out = report_dir_for(name, negative_control)
    shutil.rmtree(out, ignore_errors=True)
    (out / "logs").mkdir(parents=True)
    started = time.monotonic()
    with registry.server_for(module) as server_url, \
            db.scratch_database(server_url, "d2drill", application_name="d2-drill") as (url, engine):
        cluster = LocalCluster(url, out / "logs")
        drill = Drill(name, quick, negative_control, url, engine, cluster, out)
        not_run = None
        with _Live(drill, live):
            try:
                module.run(drill)
            except NotRun as exc:
                not_run = str(exc)
            except Exception as exc:
                (out / "error.txt").write_text(traceback.format_exc())
                drill.check("the drill ran to the end", False, f"{type(exc).__name__}: {exc}")
            finally:
                cluster.stop(timeout=STOP_TIMEOUT_SECONDS)
        try:
            with engine.connect() as conn:
                picture = timeline.collect(conn, drill)
        except Exception as exc:  # e.g. the database did not come back: the verdict still gets written
            drill.check("the history could be read back for the timeline", False, f"{type(exc).__name__}: {exc}")
            picture = timeline.Picture(drill.elapsed(), [], {}, 1.0, 0, 0)
    passed = not not_run and bool(drill.invariants) and all(i.holds for i in drill.invariants)
    result = {
        "drill": name,
        "follow_up": module.FOLLOW_UP,
        "passed": passed,
        "verdict": f"not run: {not_run}" if not_run else "passed" if passed else "FAILED",
        "not_run": not_run,
        "invariants": [i.as_dict() for i in drill.invariants],
        "scaled": drill.scaled,
        "report": str(out / "report.md"),
        "mode": "quick" if quick else "full",
        "finished_at": drill.now().isoformat(timespec="seconds"),
        "negative_control": registry.negative_control(module) if negative_control else None,
        "duration_s": round(time.monotonic() - started, 1),
        "metrics": drill.metrics,
        "notes": drill.notes,
    }
    report.write(out, module, drill, result, timeline.render_svg(picture, drill, result))
    if publish:
        if negative_control:
            raise ValueError("a negative control's report is not published")
        report.publish(out, PUBLISH_DIR / name)
    return result
