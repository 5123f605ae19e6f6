"""The diagram check: a real, non-trivial PNG, read from its IHDR chunk; the drawing is never judged."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from d2kit.scoring.diagram import NOT_JUDGED, check_diagram


def _png(width: int, height: int, payload: bytes = b"") -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", payload) + chunk(b"IEND", b"")


def test_a_real_diagram_passes_and_says_it_was_not_judged(tmp_path: Path):
    path = tmp_path / "attempt-d2.png"
    path.write_bytes(_png(1600, 900, b"x" * 20_000))
    result = check_diagram(path)
    assert result.ok and (result.width, result.height) == (1600, 900)
    assert result.note == NOT_JUDGED


def test_missing_fake_and_blank_diagrams_fail(tmp_path: Path):
    assert check_diagram(tmp_path / "nope.png").verdict == "no diagram file"
    fake = tmp_path / "fake.png"
    fake.write_text("I promise this is a diagram")
    assert check_diagram(fake).verdict == "not a PNG file"
    tiny = tmp_path / "tiny.png"
    tiny.write_bytes(_png(32, 32))
    result = check_diagram(tiny)
    assert not result.ok and result.width == 32
