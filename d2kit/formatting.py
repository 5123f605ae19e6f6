"""How a number reads on the site and in the CLI: one place, no dependencies (the CLI imports it at start-up)."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal


def fmt_number(value: float, digits: int = 0) -> str:
    """Thousands separators, rounding half up (so 4,166.5 + 915.8 reads as the 5,083 it sums to)."""
    rounded = Decimal(str(value)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return f"{rounded:,.{digits}f}"


def fmt_bytes(value: float) -> str:
    """Decimal units, three significant figures: 13.5 GB, 189 GB, 4.93 TB."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if value >= size:
            scaled = value / size
            return f"{scaled:.3g} {unit}" if scaled < 1000 else f"{scaled:,.0f} {unit}"
    return f"{value:.0f} B"


def fmt_duration(seconds: float) -> str:
    """34 s, 1 min, 1.5 min, 57 min, 2.5 h."""
    if math.isinf(seconds):
        return "never (no spare capacity)"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        minutes = seconds / 60
        return f"{minutes:.0f} min" if minutes >= 10 or minutes.is_integer() else f"{minutes:.1f} min"
    return f"{seconds / 3600:.1f} h"


def fmt_percent(fraction: float, digits: int = 0) -> str:
    return f"{fraction * 100:.{digits}f}%"
