"""Authoring script for the four reference diagrams: writes designs/d2/diagrams/*.excalidraw.

The .excalidraw files are the sources a reader opens in Excalidraw; this script is how they were laid out,
with the figures (process counts, lease, heartbeat) taken from scale.yaml through capacity.py so the
pictures agree with the design doc. After running it, `make diagrams` re-exports SVG and PNG.

    .venv/bin/python designs/d2/diagrams/draw.py
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path

from d2kit import capacity

OUT = Path(__file__).resolve().parent

HAND, CODE = 5, 3  # Excalifont (hand-drawn) and Cascadia (monospace), both bundled with the exporter
CHAR_WIDTH = {HAND: 0.56, CODE: 0.6}  # average advance per character, in font sizes
LINE_HEIGHT = 1.25

INK = "#1e1e1e"
GREY = ("#e9ecef", "#868e96")
BLUE = ("#d0ebff", "#1971c2")
GREEN = ("#d3f9d8", "#2f9e44")
YELLOW = ("#fff3bf", "#f08c00")
RED = ("#ffe3e3", "#e03131")
VIOLET = ("#e5dbff", "#6741d9")
WHITE = ("#ffffff", INK)


def text_size(text: str, size: int, font: int) -> tuple[float, float]:
    lines = text.split("\n")
    return max(len(line) for line in lines) * size * CHAR_WIDTH[font], len(lines) * size * LINE_HEIGHT


@dataclass(frozen=True)
class Box:
    id: str
    x: float
    y: float
    w: float
    h: float

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def cy(self) -> float:
        return self.y + self.h / 2

    @property
    def right(self) -> float:
        return self.x + self.w

    @property
    def bottom(self) -> float:
        return self.y + self.h


class Scene:
    def __init__(self, name: str):
        self.name = name
        self.elements: list[dict] = []
        self._count = 0

    def _new_id(self, kind: str) -> str:
        self._count += 1
        return f"{self.name}-{kind}-{self._count}"

    def _element(self, kind: str, x: float, y: float, w: float, h: float, **fields) -> dict:
        element_id = fields.pop("id", None) or self._new_id(kind)
        element = {
            "id": element_id, "type": kind, "x": round(x, 2), "y": round(y, 2),
            "width": round(w, 2), "height": round(h, 2), "angle": 0,
            "strokeColor": INK, "backgroundColor": "transparent", "fillStyle": "solid",
            "strokeWidth": 2, "strokeStyle": "solid", "roughness": 1, "opacity": 100,
            "groupIds": [], "frameId": None, "roundness": None,
            # Deterministic seeds: the same script always draws the same wobble.
            "seed": zlib.crc32(element_id.encode()) & 0x7FFFFFFF, "version": 1,
            "versionNonce": zlib.crc32(element_id[::-1].encode()) & 0x7FFFFFFF,
            "isDeleted": False, "boundElements": None, "updated": 1, "link": None, "locked": False,
        }
        element.update(fields)
        self.elements.append(element)
        return element

    def text(self, x: float, y: float, text: str, *, size: int = 20, font: int = HAND, color: str = INK,
             align: str = "left", container: str | None = None, width: float | None = None) -> dict:
        natural_w, h = text_size(text, size, font)
        w = width if width is not None else natural_w
        if align == "center" and width is None:
            x -= w / 2
        elif align == "right" and width is None:
            x -= w
        return self._element("text", x, y, w, h, strokeColor=color, text=text, originalText=text,
                             fontSize=size,
                             fontFamily=font, textAlign=align, verticalAlign="middle" if container else "top",
                             containerId=container, autoResize=width is None, lineHeight=LINE_HEIGHT)

    def box(self, x: float, y: float, w: float, h: float, label: str = "", *, colors=WHITE, size: int = 20,
            font: int = HAND, shape: str = "rectangle", dashed: bool = False, stroke_width: int = 2,
            fill_style: str = "solid", text_color: str | None = None, label_top: bool = False) -> Box:
        fill, stroke = colors
        element = self._element(shape, x, y, w, h, strokeColor=stroke, backgroundColor=fill,
                                fillStyle=fill_style,
                                strokeStyle="dashed" if dashed else "solid", strokeWidth=stroke_width,
                                roundness={"type": 3} if shape == "rectangle" else {"type": 2})
        if label:
            if label_top:  # a frame's title sits at its top, free text so contents can go below it
                self.text(x + 16, y + 12, label, size=size, font=font, color=text_color or stroke)
            else:
                _, text_h = text_size(label, size, font)
                label_element = self.text(x + 8, y + (h - text_h) / 2, label, size=size, font=font,
                                          color=text_color or INK, align="center", container=element["id"],
                                          width=w - 16)
                element["boundElements"] = [{"type": "text", "id": label_element["id"]}]
        return Box(element["id"], x, y, w, h)

    def badge(self, x: float, y: float, number: int, colors=VIOLET) -> Box:
        """A numbered circle: the step numbers that tie arrows to the legend."""
        return self.box(x, y, 28, 28, str(number), colors=colors, shape="ellipse", size=16)

    def arrow(self, points: list[tuple[float, float]], *, color: str = INK, dashed: bool = False,
              both: bool = False, start: Box | None = None, end: Box | None = None, width: int = 2,
              head: str | None = "arrow") -> dict:
        x0, y0 = points[0]
        relative = [[round(px - x0, 2), round(py - y0, 2)] for px, py in points]
        xs, ys = [p[0] for p in relative], [p[1] for p in relative]
        element = self._element(
            "arrow", x0, y0, max(xs) - min(xs), max(ys) - min(ys), strokeColor=color, strokeWidth=width,
            strokeStyle="dashed" if dashed else "solid", roundness={"type": 2}, points=relative,
            lastCommittedPoint=None, startArrowhead="arrow" if both else None, endArrowhead=head,
            elbowed=False,
            startBinding={"elementId": start.id, "focus": 0, "gap": 4} if start else None,
            endBinding={"elementId": end.id, "focus": 0, "gap": 4} if end else None)
        for box in (start, end):
            if box:
                self._bind(box.id, element["id"])
        return element

    def line(self, points: list[tuple[float, float]], *, color: str = INK, dashed: bool = False,
             width: int = 2) -> dict:
        return self.arrow(points, color=color, dashed=dashed, width=width, head=None)

    def _bind(self, box_id: str, arrow_id: str) -> None:
        box = next(e for e in self.elements if e["id"] == box_id)
        box["boundElements"] = (box["boundElements"] or []) + [{"type": "arrow", "id": arrow_id}]

    def save(self) -> Path:
        path = OUT / f"{self.name}.excalidraw"
        scene = {"type": "excalidraw", "version": 2, "source": "d2kit designs/d2/diagrams/draw.py",
                 "elements": self.elements,
                 "appState": {"viewBackgroundColor": "#ffffff", "gridSize": None}, "files": {}}
        path.write_text(json.dumps(scene, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return path


# ---------------------------------------------------------------------------------------------------------

def architecture(scale: dict, cap: capacity.Capacity) -> Scene:
    s = Scene("architecture")
    lease = scale["lease"]
    s.text(0, 0, "Architecture: one PostgreSQL, stateless replicas, two worker pools", size=30)

    tenants = s.box(490, 70, 340, 70, "Tenants (API key)", colors=GREY, shape="ellipse", size=22)
    api = s.box(490, 200, 340, 84, "API (stateless)\nvalidate · idempotency key", colors=GREY, size=20)
    s.arrow([(660, 140), (660, 200)], start=tenants, end=api)
    s.badge(672, 152, 1)
    s.text(708, 152, "submit · cancel · history", size=18)

    pg = s.box(470, 350, 380, 500, "", colors=BLUE, stroke_width=3)
    s.text(660, 366, "PostgreSQL primary", size=26, align="center", color=BLUE[1])
    s.text(660, 402, "all state · the only clock: now()", size=19, align="center", color=BLUE[1])
    tables = [
        "jobs\ncursor: next_fire_at",
        "occurrences\nUNIQUE (job_id, fire_at)",
        "attempts\nPK token · lease_expires_at",
        "pools · tenants\nadmission bucket · caps",
        "fence_rejections\nprocesses (skew)",
    ]
    for index, label in enumerate(tables):
        s.box(490, 445 + index * 80, 340, 66, label, size=17, font=CODE)
    s.arrow([(660, 284), (660, 350)], start=api, end=pg)
    s.badge(672, 302, 2)
    s.text(708, 302, "INSERT job + cursor", size=18)

    standby = s.box(500, 920, 320, 66, "synchronous standby", colors=GREY, dashed=True, size=20)
    s.arrow([(660, 850), (660, 920)], start=pg, end=standby, dashed=True)
    s.text(675, 870, "WAL, sync commit", size=18)

    replicas = s.box(0, 350, 330, 500, "Scheduler replicas ×3\nactive-active, no leader", colors=GREY,
                     dashed=True, size=22, fill_style="hachure", label_top=True, text_color=INK)
    for index in range(3):
        s.box(20, 445 + index * 130, 290, 104,
              f"replica {index + 1}\nmaterialise due fire times\nreap expired leases", colors=WHITE, size=18)
    s.arrow([(330, 500), (470, 500)], start=replicas, end=pg)
    s.badge(338, 462, 3)
    s.text(372, 462, "materialise", size=18)
    s.arrow([(330, 760), (470, 760)], start=replicas, end=pg)
    s.badge(338, 722, 8)
    s.text(372, 722, "reap", size=18)

    fleet = s.box(990, 350, 360, 500, "", colors=GREY, dashed=True, fill_style="hachure")
    short, long = cap.pools["short"], cap.pools["long"]
    short_pool = s.box(1010, 370, 320, 270, f"pool short · ×{short.processes} processes", colors=GREEN,
                       size=20, label_top=True)
    for index in range(2):
        s.box(1030, 420 + index * 104, 280, 90,
              f"worker · {short.slots_per_process} slots\nclaim · run · heartbeat\ncomplete · watchdog",
              size=17)
    long_pool = s.box(1010, 660, 320, 170, f"pool long · ×{long.processes} processes", colors=YELLOW,
                      size=20, label_top=True)
    s.box(1030, 710, 280, 90,
          f"worker · {long.slots_per_process} slots\nclaim · run · heartbeat\ncomplete · watchdog", size=17)
    s.arrow([(990, 450), (850, 450)], start=short_pool, end=pg, both=True)
    s.badge(858, 412, 4)
    s.text(892, 412, "claim", size=18)
    s.arrow([(990, 530), (850, 530)], start=short_pool, end=pg)
    s.badge(858, 492, 5)
    s.text(892, 492, "heartbeat", size=18)
    s.arrow([(990, 610), (850, 610)], start=short_pool, end=pg)
    s.badge(858, 572, 7)
    s.text(892, 572, "complete", size=18)
    s.arrow([(990, 745), (850, 745)], start=long_pool, end=pg, both=True)
    for index, number in enumerate((4, 5, 7)):
        s.badge(858 + index * 36, 700, number)

    ledger = s.box(1010, 920, 320, 80, "the job's own storage\nrefuses token < highest", colors=RED, size=19)
    s.arrow([(1170, 850), (1170, 920)], start=fleet, end=ledger, color=RED[1])
    s.badge(1182, 870, 6)
    s.text(1218, 870, "write with token", size=18, color=RED[1])

    legend = [
        "tenants submit jobs with an idempotency key",
        "the API writes the job and its cursor",
        "any replica locks due jobs (SKIP LOCKED) and writes one",
        "row per fire time: INSERT ... ON CONFLICT DO NOTHING",
        f"claim a batch: lease = now() + {lease['lease_seconds']} s, new fencing token",
        f"heartbeat every {lease['heartbeat_seconds']} s, answered ok · cancel · lost",
        "the job writes with its token; a stale token is refused",
        "complete: accepted only if the token is still current",
        "reaper: lease expired by the DB clock → lost → retry, new token",
    ]
    numbers = [1, 2, 3, None, 4, 5, 6, 7, 8]
    s.box(0, 1040, 1350, 250, "", colors=GREY, dashed=True)
    for index, (number, line) in enumerate(zip(numbers, legend, strict=True)):
        column, row = divmod(index, 4) if index < 4 else (1, index - 4)
        x, y = 20 + column * 670, 1060 + row * 34
        if number:
            s.badge(x, y - 2, number)
        s.text(x + 38, y, line, size=19)
    s.text(20, 1250,
           "Correctness lives in PostgreSQL keys and row locks; any process can die at any instant.",
           size=19, color=BLUE[1])
    return s


def lease_fencing(scale: dict, cap: capacity.Capacity) -> Scene:
    s = Scene("lease-fencing")
    lease = scale["lease"]
    lease_s, beat = lease["lease_seconds"], lease["heartbeat_seconds"]
    trust = lease_s * lease["worker_trust_fraction"]
    reaped_at = beat + lease_s + lease["reaper_period_seconds"]
    s.text(0, 0, "Lease and fencing across a partition (follow-up 1)", size=30)
    s.text(0, 44, "Times are the database clock. Worker A only measures elapsed time on its monotonic clock.",
           size=19, color=GREY[1])

    lanes = {"A": 260, "PG": 600, "B": 940, "store": 1260}
    heads = {
        "A": ("Worker A", GREEN), "PG": ("PostgreSQL\n(+ reaper in any replica)", BLUE),
        "B": ("Worker B", GREEN), "store": ("the job's own storage\n(ledger, key k)", RED),
    }
    bottom = 1130
    for lane, x in lanes.items():
        label, colors = heads[lane]
        head = s.box(x - 130, 100, 260, 76, label, colors=colors, size=20)
        s.line([(x, head.bottom), (x, bottom)], color=GREY[1], dashed=True)

    def message(y: float, src: str, dst: str, label: str, color: str = INK, time: str | None = None,
                label_dx: float = 0) -> None:
        x1, x2 = lanes[src], lanes[dst]
        s.arrow([(x1, y), (x2, y)], color=color)
        s.text((x1 + x2) / 2 + label_dx, y - 30, label, size=18, align="center", color=color)
        if time:
            s.text(0, y - 12, time, size=18, color=GREY[1])

    def note(y: float, lane: str, label: str, colors=YELLOW, width: float = 300, dx: float = 0) -> None:
        _, h = text_size(label, 17, HAND)
        s.box(lanes[lane] - width / 2 + dx, y, width, h + 20, label, colors=colors, size=17)

    message(230, "A", "PG", "claim → token T1 = 41", time="t = 0")
    message(300, "A", "PG", f"heartbeat → ok, lease to t+{beat + lease_s}", time=f"t = {beat}")

    # The partition: A's side of the network is cut from here until it heals.
    cut = (lanes["A"] + lanes["PG"]) / 2 + 40
    s.line([(cut, 330), (cut - 14, 380), (cut + 14, 430), (cut - 14, 480), (cut + 14, 530), (cut - 14, 580),
            (cut + 14, 630), (cut - 14, 680), (cut + 14, 730), (cut - 14, 780), (cut, 880)],
           color=RED[1], width=4)
    s.text(cut + 24, 336, "network partition\n(10 min)", size=19, color=RED[1])

    note(420, "A", f"no acked heartbeat for {trust:g} s\n→ stop the handler (self-fence);\n"
                   "a paused process cannot", width=290)
    s.text(0, 440, f"t ≈ {beat + trust:g}", size=18, color=GREY[1])
    note(540, "PG", "d2_reap: lease expired\nby the DB clock → T1 lost,\noccurrence ready again", colors=BLUE,
         width=290, dx=70)
    s.text(0, 560, f"t ≈ {reaped_at:g}", size=18, color=GREY[1])
    message(700, "B", "PG", "claim → token T2 = 42")
    message(780, "B", "store", "write(k, T2): OK, fence = 42", color=GREEN[1])
    message(860, "B", "PG", "complete(T2): OK, succeeded", color=GREEN[1])

    s.line([(40, 900), (1400, 900)], color=RED[1], dashed=True)
    s.text(40, 906, "partition heals", size=18, color=RED[1])
    message(970, "A", "store", "late write(k, T1): REFUSED, 41 < 42", color=RED[1], time="t ≈ 600",
            label_dx=80)
    message(1040, "A", "PG", "complete(T1): REFUSED", color=RED[1])
    message(1110, "A", "PG", "heartbeat → lost: give up", color=RED[1])

    s.box(0, 1160, 1400, 110, "", colors=GREY, dashed=True)
    s.text(20, 1175, "Three layers, weakest first: A stops itself (needs a running process) · d2_complete "
                     "refuses a token that is not current ·", size=19)
    s.text(20, 1210, "the job's storage refuses a token lower than the highest it has seen "
                     "(works even after a GC pause or a frozen VM).", size=19)
    return s


def catch_up(scale: dict, cap: capacity.Capacity) -> Scene:
    s = Scene("catch-up")
    s.text(0, 0, "Catch-up after 2 hours down: the job's misfire policy decides (follow-up 3)", size=30)
    s.text(0, 44,
           "One job firing every 15 minutes. Every circle is an occurrence row; none is silently lost.",
           size=19, color=GREY[1])

    x0, step = 300, 110  # 07:00 at x0, 15 minutes per step
    times = [f"{7 + (q * 15) // 60:02d}:{(q * 15) % 60:02d}" for q in range(10)]

    def x_of(quarter: float) -> float:
        return x0 + quarter * step

    s.box(x_of(0.2), 95, x_of(8.35) - x_of(0.2), 640, "", colors=RED, dashed=True, fill_style="hachure")
    s.text(x_of(4.2), 100, "every scheduler replica down", size=20, align="center", color=RED[1])
    for quarter, label in enumerate(times):
        s.text(x_of(quarter), 135, label, size=18, align="center", color=GREY[1])
    s.line([(x_of(8.35), 130), (x_of(8.35), 740)], color=BLUE[1], width=3)
    s.text(x_of(8.35) + 8, 700, "back\n09:05", size=18, color=BLUE[1])

    rows = [
        ("skip", "misfire:skip", set(), set()),
        ("run_once\n(default)", "misfire:superseded", {8}, set()),
        ("run_all\nmax_catchup = 3", "misfire:over_max_catchup", {6, 7, 8}, set()),
        ("run_all\ncatchup_window = 1 h", "outside_catchup_window", {5, 6, 7, 8}, {1, 2, 3, 4}),
    ]
    for index, (policy, reason, runs, outside) in enumerate(rows):
        y = 190 + index * 140
        s.box(0, y, 250, 90, policy, colors=VIOLET, size=19, font=CODE)
        for quarter in range(10):
            cx, cy = x_of(quarter), y + 35
            ran = quarter in runs or quarter in (0, 9)
            s.box(cx - 16, cy - 16, 32, 32, "", colors=GREEN if ran else GREY, shape="ellipse",
                  fill_style="solid" if ran else "hachure")
        skipped = [q for q in range(1, 9) if q not in runs]
        caption = f"{len(skipped)} rows skipped: {reason}"
        if outside and runs:
            caption = f"{len(outside)} rows skipped: {reason} · {len(runs)} run, oldest first"
        elif runs:
            caption += f" · {len(runs)} run{'s' if len(runs) > 1 else ''} at 09:05"
        s.text(x_of(1) - 16, y + 62, caption, size=18, color=INK)
    s.text(x_of(9), 172, "next\nfire", size=16, align="center", color=GREEN[1])
    s.text(x_of(0), 172, "ran", size=16, align="center", color=GREEN[1])

    s.box(0, 770, 1400, 140, "", colors=GREY, dashed=True)
    s.box(20, 790, 26, 26, "", colors=GREEN, shape="ellipse")
    s.text(56, 790, "runs", size=19)
    s.box(140, 790, 26, 26, "", colors=GREY, shape="ellipse", fill_style="hachure")
    s.text(176, 790, "written as skipped, with the reason", size=19)
    threshold = scale["lease"]["misfire_threshold_seconds"]
    s.text(20, 830, f"A fire time is missed when it is materialised more than {threshold} s late "
                    "(database clock).", size=19)
    s.text(20, 865, f"What runs is dispatched through the pool's admission bucket "
                    f"({scale['catch_up']['short_pool_admission_rate']:,}/s for short), so a catch-up "
                    "drains at a known rate.", size=19)
    return s


def tenant_pools(scale: dict, cap: capacity.Capacity) -> Scene:
    s = Scene("tenant-pools")
    long_from = scale["workers"]["long_pool_from_seconds"]
    s.text(0, 0, "Tenant isolation: pools by duration, caps per tenant, fair claiming (follow-up 4)", size=30)

    submit = s.box(0, 330, 170, 70, "submit job", colors=GREY, size=20)
    route = s.box(210, 280, 230, 170, f"expected\nduration\n≥ {long_from // 60:g} min?", colors=VIOLET,
                  shape="diamond", size=19)
    s.arrow([(170, 365), (210, 365)], start=submit, end=route)

    tenant_colors = {"A": RED, "B": BLUE, "C": GREEN, "-": WHITE}

    def lane(y: float, title: str, colors, queues: list[tuple[str, int, str]], slots: list[str],
             cap_note: str) -> Box:
        frame = s.box(480, y, 940, 300, title, colors=colors, size=22, label_top=True, dashed=True)
        for index, (name, count, label) in enumerate(queues):
            ty = y + 60 + index * 75
            for k in range(count):
                s.box(500 + k * 30, ty, 24, 24, "", colors=tenant_colors[name])
            s.text(500, ty + 30, label, size=16, color=tenant_colors[name][1])
        claim = s.box(720, y + 60, 330, 210,
                      "d2_claim · one claimer per sub-pool\n1. admission bucket ≤ rate/s\n"
                      "2. tenant running < max_running\n3. order: (running + k) ÷ weight",
                      colors=WHITE, size=17)
        s.arrow([(690, y + 165), (720, y + 165)], end=claim)
        s.text(1090, y + 50, "worker slots", size=18, color=GREY[1])
        for index, owner in enumerate(slots):
            col, row = index % 4, index // 4
            s.box(1090 + col * 78, y + 80 + row * 52, 68, 42, owner if owner != "-" else "free",
                  colors=tenant_colors[owner], size=16)
        s.arrow([(1050, y + 165), (1086, y + 165)], start=claim)
        s.text(1090, y + 245, cap_note, size=16, color=INK)
        return frame

    short_frame = lane(90, "pool short", GREEN,
                       [("A", 6, "tenant A: 10,000 ready"), ("B", 3, "tenant B: 3 ready"),
                        ("C", 2, "tenant C: 2 ready")],
                       list("AAAABBBCC---"), "A capped at max_running = 4;\nB and C start at once")
    long_frame = lane(460, "pool long · 6-hour jobs live here", YELLOW,
                      [("A", 6, "tenant A: 40 six-hour jobs"), ("B", 1, "tenant B: 1 ready"),
                       ("C", 1, "tenant C: 1 ready")],
                      list("AAAABC------"), "A's 6-hour jobs hold only\nlong-pool slots, up to its cap")
    s.arrow([(325, 280), (325, 240), (480, 240)], start=route, end=short_frame)
    s.text(335, 206, "no", size=18)
    s.arrow([(325, 450), (325, 610), (480, 610)], start=route, end=long_frame)
    s.text(335, 620, "yes", size=18)

    s.box(0, 800, 1420, 110, "", colors=GREY, dashed=True)
    s.text(20, 815, "Caps are exact because a tenant's claims serialise on its sub-pool's lock; weights give "
                    "a tenant a larger share,", size=19)
    s.text(20, 850, "never all of it. A flood waits in its own ready queue; other tenants' start delay does "
                    "not move.", size=19)
    return s


def main() -> None:
    scale = capacity.load_scale()
    cap = capacity.derive(scale)
    for draw in (architecture, lease_fencing, catch_up, tenant_pools):
        print(draw(scale, cap).save())


if __name__ == "__main__":
    main()
