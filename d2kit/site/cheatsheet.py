"""The one-page cheat sheet: the clarifying numbers, the two hard parts, the seven follow-ups in two lines
each, the arithmetic skeleton and the three legs of a failure.

One source, two renderings: :func:`build` assembles the sheet from designs/d2/scale.yaml (through
``capacity.derive``) and the rubric data, and the site page (``cheatsheet_markdown``) and ``d2kit
cheatsheet`` (``print_cheatsheet``) both print what it returns. No number is typed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import typer
from rich.console import Console
from rich.text import Text

from d2kit import capacity
from d2kit.formatting import fmt_bytes, fmt_number
from d2kit.scoring.rubric import load_design_rubric


@dataclass(frozen=True)
class Block:
    title: str
    lines: tuple[str, ...]  # inline markdown: **bold** and `code` only


def _clarifying(scale: dict) -> Block:
    work, lease = scale["workload"], scale["lease"]
    duration = scale["duration"]
    answers = {c.id: c.example for c in load_design_rubric().clarifications}
    return Block("Clarify: say these numbers", (
        f"**Scale:** {fmt_number(work['jobs'])} jobs, {fmt_number(work['peak_executions_per_minute'])} "
        f"executions/min at peak, {fmt_number(duration['min_seconds'] * 1000)} ms to "
        f"{fmt_number(duration['max_seconds'] / 3600)} h per job, {fmt_number(work['tenants'])} tenants.",
        f"**Delivery:** {answers['delivery']}",
        f"**Latency:** p99 start within {work['fire_to_start_slo_seconds']} s of the fire time; later than "
        f"{lease['misfire_threshold_seconds']} s is missed and the job's misfire policy decides.",
        f"**Ordering:** {answers['ordering']}",
        f"**Tenancy:** {answers['tenancy']}",
    ))


def _arithmetic(scale: dict, cap: capacity.Capacity) -> Block:
    short, long_ = cap.pools["short"], cap.pools["long"]
    lease, workers, storage = scale["lease"], scale["workers"], scale["storage"]
    return Block("The arithmetic skeleton", (
        f"**Rate:** {fmt_number(cap.peak_per_minute)}/min ÷ 60 = {fmt_number(cap.peak_per_second)}/s at peak; "
        f"× {fmt_number(capacity.SECONDS_PER_DAY)} s × {scale['workload']['average_to_peak']} average = "
        f"{fmt_number(cap.executions_per_day / 1e6, 1)} M/day.",
        f"**In flight (Little):** {fmt_number(short.executions_per_second)}/s × {fmt_number(short.mean_seconds)} s = "
        f"{fmt_number(short.concurrent)} short + {fmt_number(long_.concurrent)} long = "
        f"{fmt_number(cap.concurrent_total)} leases.",
        f"**Workers:** {fmt_number(short.concurrent)} ÷ {short.slots_per_process} slots × {workers['headroom']} = "
        f"{short.processes_for_slots} short processes (slots bind, not dispatch: {short.processes_for_dispatch}); "
        f"{cap.processes_total} in all.",
        f"**Storage:** {fmt_number(cap.bytes_per_execution)} B/execution × "
        f"{fmt_number(cap.executions_per_day / 1e6, 1)} M/day = {fmt_bytes(cap.storage_per_day_bytes)}/day; "
        f"{storage['retention_days']} days hot = {fmt_bytes(cap.hot_history_bytes)}.",
        f"**Claim ceiling:** {workers['claim_batch']} rows × 1,000 ms ÷ {fmt_number(cap.claim_transaction_ms)} ms = "
        f"{fmt_number(cap.claim_ceiling_per_pool_per_second)}/s per pool; at {cap.growth_factor}× the short pool "
        f"needs {fmt_number(cap.short_claims_per_second_at_growth)}/s: that breaks first.",
        f"**Liveness:** lease {lease['lease_seconds']} s, heartbeat {lease['heartbeat_seconds']} s, "
        f"a dead worker is found within {fmt_number(cap.worst_detection_seconds, 1)} s.",
    ))


def build() -> tuple[Block, ...]:
    scale = capacity.load_scale()
    cap = capacity.derive(scale)
    rubric = load_design_rubric()
    legs = rubric.criterion("failure_legs").legs
    return (
        _clarifying(scale),
        Block("The two hard parts", tuple(f"**({letter})** {part}" for letter, part in zip("ab", rubric.hard_parts,
                                                                                             strict=False))),
        Block("The seven follow-ups", tuple(
            f"**{f.number}. {f.topic}** — " + " ".join(f.in_two_lines) for f in rubric.follow_ups)),
        _arithmetic(scale, cap),
        Block("Every failure: three legs", tuple(f"**{leg.name}:** {leg.asks}" for leg in legs)),
    )


def cheatsheet_markdown() -> str:
    """The sheet for the site, inside a container the print stylesheet fits onto one A4 page."""
    parts = ['<div class="cheatsheet" markdown>', ""]
    for block in build():
        parts += [f"### {block.title}", ""]
        parts += [f"- {line}" for line in block.lines]
        parts.append("")
    parts.append("</div>")
    return "\n".join(parts) + "\n"


def _rich(line: str) -> Text:
    """Inline markdown to rich text: **bold** and `code`."""
    markup = line.replace("[", r"\[")
    markup = re.sub(r"\*\*(.+?)\*\*", r"[bold]\1[/bold]", markup)
    markup = re.sub(r"`([^`]+)`", r"[cyan]\1[/cyan]", markup)
    return Text.from_markup(markup)


def print_cheatsheet(console: Console | None = None) -> None:
    console = console or Console()
    console.rule("[bold]D2 cheat sheet: a fault-tolerant distributed job scheduler")
    for block in build():
        console.print(f"\n[bold magenta]{block.title}[/bold magenta]")
        for line in block.lines:
            console.print(Text("  • ") + _rich(line))


def cheatsheet() -> None:
    """Print the one-page cheat sheet: numbers, hard parts, the seven follow-ups, arithmetic, three legs."""
    print_cheatsheet()


def register(app: typer.Typer) -> None:
    app.command("cheatsheet")(cheatsheet)
