"""45-minute practice: the attempt file from the template, the seed's time budget on a live timer, every
save of the attempt and the drawing recorded (``round_record``), the hidden follow-ups revealed only when
time is up, then the grades.

The timer runs on an injected ``Clock`` so tests (and the terminal test, through
``D2KIT_PRACTICE_SPEED``) can run a whole round in a fraction of a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from jinja2 import Environment, PackageLoader, StrictUndefined
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.text import Text

from d2kit.scoring.document import parse_file
from d2kit.scoring.round_record import Recorder, RoundRecord, Save
from d2kit.scoring.rubric import (
    DesignRubric,
    Phase,
    ProcessRubric,
    load_design_rubric,
    load_process_rubric,
)

ATTEMPT_NAME = "attempt-d2.md"
DIAGRAM_NAME = "attempt-d2.excalidraw"
DEEP_DIVE_STARTED_WORDS = 20  # fewer words of sentences in section 6 at the deadline: still drawing boxes
TICK_SECONDS = 1.0


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class AcceleratedClock:
    """Practice time runs ``speed`` times faster than real time."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.origin = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self.origin) * self.speed

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds / self.speed)


def clock_for(speed: float) -> Clock:
    return RealClock() if speed == 1 else AcceleratedClock(speed)


@dataclass(frozen=True)
class TimerEvent:
    at: float  # seconds since the start, in practice time
    kind: str  # "phase" | "deadline" | "time_up"
    phase: Phase | None = None


def timeline(process: ProcessRubric, minutes: float) -> list[TimerEvent]:
    """The seed's time budget scaled to ``minutes``: each phase start, the deep-dive deadline, the end."""
    scale = 60 * minutes / process.minutes
    events = [TimerEvent(p.start * scale, "phase", p) for p in process.phases]
    events.append(TimerEvent(process.deep_dive_deadline.minute * scale, "deadline"))
    events.append(TimerEvent(minutes * 60, "time_up"))
    return sorted(events, key=lambda e: (e.at, e.kind == "time_up"))


def run_timer(events: list[TimerEvent], clock: Clock, on_event: Callable[[TimerEvent, float], None],
              on_tick: Callable[[float], None], tick: float = TICK_SECONDS) -> float:
    """Fire each event once its time has come, ticking in between; returns the elapsed practice time."""
    start = clock.now()
    pending = list(events)
    while pending:
        elapsed = clock.now() - start
        while pending and pending[0].at <= elapsed:
            on_event(pending.pop(0), elapsed)
        if not pending:
            break
        on_tick(elapsed)
        clock.sleep(max(0.0, min(tick, pending[0].at - elapsed)))
    return clock.now() - start


def render_attempt_template(design: DesignRubric, minutes: float, started: datetime) -> str:
    env = Environment(loader=PackageLoader("d2kit.scoring", "templates"), undefined=StrictUndefined,
                      keep_trailing_newline=True)
    return env.get_template(f"{ATTEMPT_NAME}.j2").render(
        design_name=design.design_name,
        minutes=_minutes_text(minutes),
        started=started.isoformat(timespec="minutes"),
        prompt=design.prompt,
        sections=design.sections,
        clarifications=[q.question for q in design.clarifications],
    )


def deep_dive_started(attempt: Path, section: int) -> bool:
    doc = parse_file(attempt)
    return section in doc.sections and doc.sections[section].prose_words >= DEEP_DIVE_STARTED_WORDS


def _minutes_text(minutes: float) -> str:
    return f"{minutes:g} minute{'' if minutes == 1 else 's'}"


def _clock_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def follow_ups_panel(design: DesignRubric) -> Panel:
    body = []
    for f in design.follow_ups:
        body += [Text(f"{f.number}. {f.topic}", style="bold"), Text(" ".join(f.question.split())),
                 Text(" ".join(f.probe.split()), style="dim"), Text("")]
    return Panel(Group(*body), title="Hidden follow-ups", border_style="magenta")


@dataclass
class PracticeOutcome:
    attempt: Path
    elapsed_seconds: float
    finished: bool  # False: stopped early with Ctrl-C
    record: RoundRecord


class PracticeSession:
    """One timed round: owns the display; the caller scores the attempt afterwards."""

    def __init__(self, directory: Path, minutes: float, clock: Clock, console: Console,
                 design: DesignRubric | None = None, process: ProcessRubric | None = None) -> None:
        self.directory = directory
        self.minutes = minutes
        self.clock = clock
        self.console = console
        self.design = design or load_design_rubric()
        self.process = process or load_process_rubric()
        self.attempt = directory / ATTEMPT_NAME
        self.diagram = directory / DIAGRAM_NAME
        self.phase: Phase = self.process.phases[0]
        self.warned_still_drawing = False

    def create_attempt(self, overwrite: bool) -> None:
        if self.attempt.exists() and not overwrite:
            raise FileExistsError(f"{self.attempt} exists; pass --overwrite to start again, or use another --dir")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.attempt.write_text(render_attempt_template(self.design, self.minutes, datetime.now()), encoding="utf-8")

    def show_prompt(self) -> None:
        questions = "\n".join(f"  • {q.question}" for q in self.design.clarifications)
        produce = "\n".join(f"  • {item}" for item in self.design.produce)
        self.console.print(Panel(
            Text(f"{self.design.prompt}\n\nProduce, inside the time:\n{produce}\n\n"
                 f"Clarify out loud, before designing:\n{questions}"),
            title=f"{self.design.round_id}: {self.design.round_title} — {_minutes_text(self.minutes)}, hard stop",
            border_style="cyan"))
        self.console.print(f"Your attempt: [bold]{self.attempt}[/]  Diagram: draw in Excalidraw and save the scene "
                           f"as [bold]{self.diagram}[/] (the PNG is exported from it when time is up). Every save "
                           f"of either file is recorded.")

    def _display(self, elapsed: float) -> Panel:
        total = self.minutes * 60
        status = Text(f"{_clock_text(elapsed)} / {_clock_text(total)}   phase: {self.phase.name} — "
                      f"{self.phase.activity}")
        return Panel(Group(status, ProgressBar(total=total, completed=min(elapsed, total))),
                     title="Time", border_style="green")

    def _on_event(self, event: TimerEvent, elapsed: float, live: Live) -> None:
        console = live.console
        if event.kind == "phase" and event.phase is not None:
            self.phase = event.phase
            index = self.process.phases.index(event.phase) + 1
            sections = ", ".join(str(s) for s in event.phase.sections)
            console.print(f"[bold yellow]⏱ {_clock_text(elapsed)} — phase {index}/{len(self.process.phases)}: "
                          f"{event.phase.name}[/] ({event.phase.activity} Sections {sections}.)")
        elif event.kind == "deadline":
            deadline = self.process.deep_dive_deadline
            if deep_dive_started(self.attempt, deadline.section):
                console.print(f"[green]⏱ {_clock_text(elapsed)} — the deep dive is under way. Keep going.[/]")
            else:
                console.bell()
                console.print(Panel(Text(deadline.warning, style="bold"), border_style="bold red",
                                    title=f"{_clock_text(elapsed)}: STILL DRAWING BOXES?"))
        elif event.kind == "time_up":
            console.print(Panel(Text("TIME IS UP. Pens down.", style="bold"), border_style="bold red"))
        live.update(self._display(elapsed))

    def _on_saves(self, saves: list[Save], elapsed: float, live: Live) -> None:
        """A drawing still changing after the deadline is the seed's failure line: say so when it happens."""
        deadline = self.process.deep_dive_deadline.minute
        late = [s for s in saves if s.file == "diagram" and s.minute > deadline]
        if late and not self.warned_still_drawing:
            self.warned_still_drawing = True
            live.console.bell()
            live.console.print(Panel(Text(f"The drawing changed at minute {late[0].minute:.0f}, after minute "
                                          f"{deadline:g}: still drawing boxes. Leave it and deep-dive.",
                                          style="bold"), border_style="bold red",
                                     title=f"{_clock_text(elapsed)}: STILL DRAWING"))

    def run(self, reveal_now: bool) -> PracticeOutcome:
        # The recorder takes its first look before the prompt is shown: a save made as soon as the prompt appears
        # is a save of the round, not the state it started from.
        recorder = Recorder(self.attempt, self.diagram, self.minutes, self.process.minutes)
        self.show_prompt()
        if reveal_now:
            self.console.print(follow_ups_panel(self.design))
        events = timeline(self.process, self.minutes)
        elapsed = 0.0
        finished = True
        with Live(self._display(0), console=self.console, auto_refresh=False, transient=False) as live:
            def on_tick(at: float) -> None:
                nonlocal elapsed
                elapsed = at
                self._on_saves(recorder.poll(at), at, live)
                live.update(self._display(at), refresh=True)

            def on_event(event: TimerEvent, at: float) -> None:
                self._on_saves(recorder.poll(at), at, live)  # a save just before time-up still counts
                self._on_event(event, at, live)

            try:
                elapsed = run_timer(events, self.clock, on_event, on_tick)
            except KeyboardInterrupt:
                finished = False
                live.console.print(f"[bold]Stopped at {_clock_text(elapsed)}.[/]")
        record = recorder.end(elapsed, finished)
        self.console.print()
        if not reveal_now:
            self.console.print(follow_ups_panel(self.design))
        return PracticeOutcome(self.attempt, elapsed, finished, record)
