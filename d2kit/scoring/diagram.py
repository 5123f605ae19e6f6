"""The diagram: a tool cannot judge a drawing, so it checks only that a real, non-trivial PNG exists."""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MIN_BYTES = 2_000  # an export of a few boxes and arrows is tens of kilobytes; a blank canvas is tiny
MIN_SIDE = 200
NOT_JUDGED = "The drawing itself is not judged: compare it with section 5 yourself, or ask someone to."


@dataclass(frozen=True)
class DiagramCheck:
    path: str
    ok: bool
    verdict: str
    width: int | None = None
    height: int | None = None
    size_bytes: int | None = None
    note: str = NOT_JUDGED

    def to_dict(self) -> dict:
        return asdict(self)


def check_diagram(path: Path) -> DiagramCheck:
    if not path.exists():
        return DiagramCheck(str(path), False, "no diagram file")
    data = path.read_bytes()
    # IHDR is always the first chunk: length(4) type(4) width(4) height(4), right after the signature.
    if len(data) < 24 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        return DiagramCheck(str(path), False, "not a PNG file", size_bytes=len(data))
    width, height = struct.unpack(">II", data[16:24])
    common = {"width": width, "height": height, "size_bytes": len(data)}
    if len(data) < MIN_BYTES or min(width, height) < MIN_SIDE:
        return DiagramCheck(str(path), False, f"a PNG, but too small to be a diagram ({width}x{height}, "
                            f"{len(data)} bytes)", **common)
    return DiagramCheck(str(path), True, f"a PNG, {width}x{height}, {len(data) // 1024} KiB", **common)
