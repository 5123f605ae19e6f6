"""The timeline picture: what a candidate would draw on the whiteboard, drawn from the recorded history.

One lane per worker process; each attempt is a bar from dispatch to the moment the database closed it,
coloured by outcome and labelled with its occurrence and fencing token. A lost attempt shows where its
lease expired (database clock) and, dashed, how long its handler kept running unaware, up to its refused
writes (✗). Accepted writes are ●. Fault windows are shaded, instant faults (SIGKILL) are dashed lines, the
phases run along the bottom, and a strip on top shows the dispatch rate (with the admission rate, when a
drill has one). Drills that measure rather than run (postgres-limits) add series panels.

Hand-written SVG: small, deterministic, no fonts to embed, readable in a browser and on the docs site.
"""

from __future__ import annotations

import html
import statistics
import textwrap
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

MAX_FOCUS = 14           # occurrences drawn in the lanes
MIN_DISPATCHES_FOR_RATE = 50
MAX_BINS = 90
SMOOTH_FROM = 300        # series with more samples are drawn with a rolling median
WIDTH = 1100
LEFT, RIGHT = 150, 24    # margins: lane labels on the left
LABEL_PX = 78            # room a bar's label needs after the bar
LABEL_CHAR_PX = 6.2      # width of a character of a 10 px label, roughly
ROW_H, BAR_H = 20, 12
ROW_H_ANNOTATED = 40     # with few bars, each one is annotated in words below it
STATE_COLOURS = {"succeeded": "#2e7d32", "lost": "#ef6c00", "failed": "#c62828", "running": "#757575",
                 "cancelled": "#6a1b9a", "timed_out": "#ad1457"}
FAULT_COLOUR = "#d32f2f"
MARK_COLOUR = "#1565c0"  # moments that are not faults (the 09:00:00 fire time)


@dataclass
class Bar:
    worker: str
    occurrence: int
    token: int
    state: str
    start: float
    end: float | None
    lease_expires: float | None
    tenant: str
    marks: list[tuple[float, str, str]] = field(default_factory=list)  # (t, symbol, what)

    @property
    def ghost_end(self) -> float | None:
        """A handler still running after the database closed its attempt: up to its last refused write."""
        late = [t for t, symbol, _ in self.marks if symbol == "✗"]
        return max(late) if late and self.end is not None and max(late) > self.end else None


@dataclass
class Picture:
    span: float
    bars: list[Bar]
    per_bin: dict[int, int]  # dispatches per time bin (bin index -> count)
    bin_s: float
    occurrences: int
    shown: int


def _seconds(moment: datetime | None, origin: datetime) -> float | None:
    return None if moment is None else (moment - origin).total_seconds()


def collect(conn: Connection, drill) -> Picture:
    """Read what the picture needs from the drill's database (before it is dropped)."""
    t0 = drill.started_at
    focus = (list(drill.focus) or _sample(conn)) if drill.show_lanes else []
    bars: dict[int, Bar] = {}
    for a in conn.execute(text(
            "SELECT a.token, a.occurrence_id, a.worker_id, a.state, a.dispatched_at, a.finished_at,"
            " a.lease_expires_at, o.tenant_id FROM attempts a JOIN occurrences o ON o.id = a.occurrence_id"
            " WHERE a.occurrence_id = ANY(:ids) ORDER BY a.token"), {"ids": focus}).mappings():
        bars[a["token"]] = Bar(a["worker_id"], a["occurrence_id"], a["token"], a["state"],
                               _seconds(a["dispatched_at"], t0), _seconds(a["finished_at"], t0),
                               _seconds(a["lease_expires_at"], t0) if a["state"] == "lost" else None,
                               a["tenant_id"])
    tokens = list(bars)
    for token, path, at in conn.execute(text(
            "SELECT token, path, rejected_at FROM fence_rejections WHERE token = ANY(:t) ORDER BY id"),
            {"t": tokens}):
        bars[token].marks.append((_seconds(at, t0), "✗", f"{path.replace('_', ' ')} refused"))
    for token, at in conn.execute(text(
            "SELECT token, at FROM ledger_effects WHERE accepted AND token = ANY(:t) ORDER BY id"), {"t": tokens}):
        bars[token].marks.append((_seconds(at, t0), "●", "write accepted"))
    bin_s = next((b for b in (0.1, 0.25, 0.5, 1, 2, 5, 10, 30) if drill.elapsed() / b <= MAX_BINS), 60)
    per_bin = dict(conn.execute(text(
        "SELECT floor(extract(epoch FROM dispatched_at - :t0) / :b)::int, count(*) FROM attempts GROUP BY 1"),
        {"t0": t0, "b": bin_s}).all())
    occurrences = conn.execute(text("SELECT count(*) FROM occurrences")).scalar_one()
    phases_end = [_seconds(w.end, t0) for w in drill.phases + drill.faults if w.end is not None]
    ends = [1.0, *phases_end] + [b.end or 0 for b in bars.values()] + [m[0] for b in bars.values() for m in b.marks]
    shown = len({b.occurrence for b in bars.values()})
    span = max(ends) * 1.06  # room on the right for the last labels
    return Picture(span, list(bars.values()), per_bin, bin_s, occurrences, shown)


def _sample(conn: Connection) -> list[int]:
    """Occurrences worth drawing: retried or fenced ones first, then a spread over the whole run (evenly by
    first dispatch), so lanes show every phase rather than the first few milliseconds."""
    interesting = [row[0] for row in conn.execute(text("""
        SELECT o.id FROM occurrences o
        WHERE o.attempts > 1 OR EXISTS (SELECT 1 FROM fence_rejections f WHERE f.occurrence_id = o.id)
        ORDER BY o.id LIMIT :n"""), {"n": MAX_FOCUS})]
    if len(interesting) >= MAX_FOCUS:
        return interesting
    ordered = [row[0] for row in conn.execute(text(
        "SELECT occurrence_id FROM attempts GROUP BY occurrence_id ORDER BY min(dispatched_at)"))]
    room = MAX_FOCUS - len(interesting)
    spread = [ordered[round(i * (len(ordered) - 1) / max(1, room - 1))] for i in range(room)] if ordered else []
    return list(dict.fromkeys(interesting + spread))


# -- drawing ------------------------------------------------------------------------------------------
class _Svg:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(self, x: float, y: float, content: str, size: int = 11, colour: str = "#222", anchor: str = "start",
             weight: str = "normal") -> None:
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{colour}" text-anchor="{anchor}" '
                 f'font-weight="{weight}">{html.escape(content)}</text>')

    def rect(self, x: float, y: float, w: float, h: float, fill: str, extra: str = "", title: str = "") -> None:
        body = f"<title>{html.escape(title)}</title></rect>" if title else "/>"
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 1.5):.1f}" height="{h:.1f}" fill="{fill}" {extra}'
                 + (">" + body if title else body))

    def line(self, x1: float, y1: float, x2: float, y2: float, colour: str, extra: str = "") -> None:
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}" {extra}/>')


def _tick_step(span: float) -> float:
    for step in (0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600):
        if span / step <= 12:
            return step
    return 1200


def _label_start(x: float, width: float) -> float:
    """Where a label at ``x`` starts: just right of its line, or ending at it when it would run off the edge."""
    return x + 2 if x + 2 + width <= WIDTH - 4 else x - 2 - width


def _rolling_median(points: list[tuple[datetime, float]], window: int) -> list[tuple[datetime, float]]:
    half = max(1, window // 2)
    return [(t, statistics.median(v for _, v in points[max(0, i - half):i + half + 1]))
            for i, (t, _) in enumerate(points)]


def _pack(bars: list[Bar], x) -> dict[str, list[list[Bar]]]:
    """Lanes per worker (in order of first dispatch); within a lane, bars in rows that do not overlap."""
    lanes: dict[str, list[list[Bar]]] = {}
    for bar in sorted(bars, key=lambda b: (b.start, b.token)):
        rows = lanes.setdefault(bar.worker, [])
        for row in rows:
            if _right_edge(row[-1], x) <= x(bar.start):
                row.append(bar)
                break
        else:
            rows.append([bar])
    return lanes


def _right_edge(bar: Bar, x) -> float:
    ends = [bar.end or bar.start, bar.ghost_end or 0, *(m[0] for m in bar.marks)]
    return x(max(ends)) + LABEL_PX


def render_svg(picture: Picture, drill, result: dict[str, Any]) -> str:
    span = max(picture.span, 1.0)
    plot_w = WIDTH - LEFT - RIGHT

    def x(t: float) -> float:
        return LEFT + max(0.0, min(t, span)) / span * plot_w

    lanes = _pack(picture.bars, x)
    svg = _Svg()
    y = 28
    verdict = "PASSED" if result["passed"] else "FAILED"
    svg.text(16, y, f"{drill.name}: {verdict}", size=16, weight="bold",
             colour="#2e7d32" if result["passed"] else FAULT_COLOUR)
    y += 18
    for line in textwrap.wrap("; ".join(f"{k}: {v}" for k, v in drill.scaled.items()), 170):
        svg.text(16, y, line, size=11, colour="#555")
        y += 15
    top = y + 14  # fault labels go here, the panels below

    label_rows: list[list[tuple[float, float]]] = []

    def label_y(x0: float, width: float) -> float:
        """Stagger fault labels so they do not overwrite each other."""
        x0 = _label_start(x0, width)
        for i, taken in enumerate(label_rows):
            if all(x0 > b or x0 + width < a for a, b in taken):
                taken.append((x0, x0 + width))
                return top + 12 * i
        label_rows.append([(x0, x0 + width)])
        return top + 12 * (len(label_rows) - 1)

    fault_labels = [(f, label_y(x(_seconds(f.start, drill.started_at)), LABEL_CHAR_PX * len(f.label)), FAULT_COLOUR)
                    for f in drill.faults]
    fault_labels += [(m, label_y(x(_seconds(m.start, drill.started_at)), LABEL_CHAR_PX * len(m.label)), MARK_COLOUR)
                     for m in drill.marks]
    y = top + 12 * max(1, len(label_rows)) + 6
    panels_top = y

    # Dispatches per second (only where there are enough to make a rate)
    if sum(picture.per_bin.values()) >= MIN_DISPATCHES_FOR_RATE:
        height = 60
        rates = {i: n / picture.bin_s for i, n in picture.per_bin.items()}
        peak = max(max(rates.values()), drill.rate_line or 0)
        svg.text(LEFT - 8, y + 10, "dispatches/s", size=10, anchor="end", colour="#555")
        svg.text(LEFT - 8, y + 22, f"peak {max(rates.values()):,.0f}/s", size=10, anchor="end", colour="#555")
        svg.text(LEFT - 8, y + 34, f"({picture.bin_s:g} s bins)", size=10, anchor="end", colour="#555")
        for i, rate in rates.items():
            h = rate / peak * height
            start, end = i * picture.bin_s, (i + 1) * picture.bin_s
            svg.rect(x(start), y + height - h, max(1.0, x(end) - x(start) - 0.5), h, "#90a4ae")
        if drill.rate_line:
            ry = y + height - drill.rate_line / peak * height
            svg.line(LEFT, ry, LEFT + plot_w, ry, FAULT_COLOUR, 'stroke-dasharray="4 3"')
            svg.text(LEFT + plot_w, ry - 3, f"admission rate {drill.rate_line:g}/s", size=10, anchor="end",
                     colour=FAULT_COLOUR)
        svg.line(LEFT, y + height, LEFT + plot_w, y + height, "#999")
        y += height + 14

    # Worker lanes
    few = len(picture.bars) <= 12
    tenants = len({b.tenant for b in picture.bars}) > 1
    row_h = ROW_H_ANNOTATED if few else ROW_H
    for worker, rows in lanes.items():
        lane_h = row_h * len(rows) + 8
        svg.rect(LEFT, y, plot_w, lane_h, "#f5f5f5")
        svg.text(LEFT - 8, y + 14, worker, size=11, anchor="end", weight="bold")
        for r, row in enumerate(rows):
            by = y + (16 if few else 4) + r * row_h
            for bar in row:
                _draw_bar(svg, bar, by, x, span, few, tenants)
        y += lane_h + 4
    if picture.bars:
        svg.text(LEFT, y + 12, f"lanes show {picture.shown} of {picture.occurrences:,} occurrences (retried or fenced "
                 f"ones first); label: {'tenant, ' if tenants else ''}occurrence · fencing token", size=10,
                 colour="#555")
        y += 18

    # Measured series
    for series in drill.series:
        if series.points:
            y = _draw_series(svg, series, y, x, plot_w, drill.started_at)
    panels_bottom = y

    # Faults over everything
    for window, ly, colour in fault_labels:
        fx = x(_seconds(window.start, drill.started_at))
        if window.end is None:
            svg.line(fx, ly + 2, fx, panels_bottom, colour, 'stroke-dasharray="3 3"')
        else:
            svg.rect(fx, panels_top, x(_seconds(window.end, drill.started_at)) - fx, panels_bottom - panels_top,
                     colour, 'fill-opacity="0.10"')
        svg.text(_label_start(fx, LABEL_CHAR_PX * len(window.label)), ly, window.label, size=10, colour=colour)

    # Phases along the bottom, then the time axis
    for i, phase in enumerate(drill.phases):
        px0 = x(_seconds(phase.start, drill.started_at))
        px1 = x(_seconds(phase.end or drill.now(), drill.started_at))
        svg.rect(px0, y, px1 - px0, 16, "#eceff1" if i % 2 else "#cfd8dc")
        if px1 - px0 > 6.0 * len(phase.label):
            svg.text(px0 + 3, y + 12, phase.label, size=10, colour="#37474f")
    svg.text(LEFT - 8, y + 12, "phases", size=10, anchor="end", colour="#555")
    y += 22
    step = _tick_step(span)
    tick = 0.0
    while tick <= span + 1e-9:
        svg.line(x(tick), y, x(tick), y + 4, "#555")
        svg.text(x(tick), y + 15, f"{tick:g}s", size=10, anchor="middle", colour="#555")
        tick += step
    y += 26
    svg.text(LEFT, y, "database clock, seconds since the drill started", size=10, colour="#555")
    y += 16
    legend_x = LEFT
    for state, colour in STATE_COLOURS.items():
        svg.rect(legend_x, y - 9, 12, 10, colour)
        svg.text(legend_x + 16, y, f"attempt {state}", size=10)
        legend_x += 118
    svg.text(legend_x, y, "┆ lease expiry   ✗ refused by the fence   ● accepted write   ▒ fault", size=10)
    height = y + 12
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
            f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="system-ui, -apple-system, Segoe UI, sans-serif">'
            f'<rect width="100%" height="100%" fill="white"/>' + "".join(svg.parts) + "</svg>\n")


def _draw_series(svg: _Svg, series, y: float, x, plot_w: float, t0: datetime) -> float:
    """One panel: the series against time, with its limit line; returns the y below it."""
    height = 60
    values = [v for _, v in series.points]
    smooth = len(values) > SMOOTH_FROM
    top = sorted(values)[int(len(values) * 0.98)] * 1.5 if smooth else max(values)  # outliers must not flatten it
    peak = max(top, series.limit or 0) * 1.1 or 1.0
    low = min(0.0, *values)  # a value may be negative (e.g. written after its fire time)

    def y_of(v: float) -> float:
        return y + height - (min(v, peak) - low) / (peak - low) * height

    for i, line in enumerate(textwrap.wrap(series.label, 24)[:3]):
        svg.text(LEFT - 8, y + 10 + 11 * i, line, size=10, anchor="end", colour="#555")
    svg.text(LEFT - 8, y + 46, f"max {max(values):.3g} {series.unit}", size=10, anchor="end", colour="#555")

    def polyline(points, style: str) -> None:
        coords = " ".join(f"{x(_seconds(t, t0)):.1f},{y_of(v):.1f}" for t, v in points)
        svg.add(f'<polyline points="{coords}" fill="none" stroke="#1565c0" {style}/>')

    if smooth:  # noisy samples: faint (clipped at the top), with their rolling median on top
        polyline(series.points, 'stroke-width="0.6" stroke-opacity="0.3"')
        polyline(_rolling_median(series.points, len(series.points) // 60), 'stroke-width="1.8"')
    else:
        polyline(series.points, 'stroke-width="1.2"')
    if series.limit is not None:
        ly = y_of(series.limit)
        svg.line(LEFT, ly, LEFT + plot_w, ly, FAULT_COLOUR, 'stroke-dasharray="4 3"')
        svg.text(LEFT + plot_w, ly - 3, f"limit {series.limit:g} {series.unit}", size=10, anchor="end",
                 colour=FAULT_COLOUR)
    svg.line(LEFT, y + height, LEFT + plot_w, y + height, "#999")
    return y + height + 14


def _draw_bar(svg: _Svg, bar: Bar, by: float, x, span: float, few: bool, tenants: bool) -> None:
    end = bar.end if bar.end is not None else span
    colour = STATE_COLOURS.get(bar.state, "#757575")
    svg.rect(x(bar.start), by, x(end) - x(bar.start), BAR_H, colour, 'rx="2"',
             title=f"occurrence {bar.occurrence}, token {bar.token}, {bar.worker}: {bar.state}")
    ghost = bar.ghost_end
    if ghost is not None:
        svg.rect(x(end), by + 2, x(ghost) - x(end), BAR_H - 4, "none",
                 f'stroke="{colour}" stroke-dasharray="4 2"')
        if few and x(ghost) - x(end) > 130:
            svg.text(x(end) + 4, by + BAR_H + 9, "handler still running, unaware", size=9, colour=colour)
    if bar.lease_expires is not None:
        lx = x(bar.lease_expires)
        svg.line(lx, by - 2, lx, by + BAR_H + 2, "#111", 'stroke-width="1.5" stroke-dasharray="2 1"')
        if few:
            svg.text(lx, by - 3, "lease expired", size=9, anchor="middle", colour="#111")
    for i, (t, symbol, what) in enumerate(sorted(bar.marks)):
        colour_mark = FAULT_COLOUR if symbol == "✗" else "#1b5e20"
        svg.text(x(t), by + BAR_H - 1 - 4 * (i % 2), symbol, size=13, anchor="middle", colour=colour_mark,
                 weight="bold")
        if few:  # stacked, so marks close in time keep readable labels
            svg.text(x(t) + 6, by + BAR_H + 9 + 9 * (i % 2), what, size=9, colour=colour_mark, anchor="end")
    label = f"{bar.tenant + ' ' if tenants else ''}occ {bar.occurrence} · t{bar.token}"
    right = max([x(end), x(ghost) if ghost else 0, *(x(m[0]) + 8 for m in bar.marks)])
    if x(end) - x(bar.start) > 6.0 * len(label) + 6:
        svg.text(x(bar.start) + 4, by + BAR_H - 2, label, size=9, colour="white")
    else:
        svg.text(right + 4, by + BAR_H - 2, label, size=9, colour="#333")
