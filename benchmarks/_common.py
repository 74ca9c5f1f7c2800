"""Standard-library helpers shared by the benchmark harnesses (imports neither lazyvic nor
torch, so a parent process can use them)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def source_fingerprint() -> dict:
    """git HEAD and a hash of lazyvic's sources (uncommitted edits included): others commit
    to this checkout while benchmarks run, and every child imports the sources anew."""
    h = hashlib.sha1()
    for f in sorted((ROOT / "lazyvic").rglob("*.py")):
        h.update(str(f.relative_to(ROOT)).encode())
        h.update(f.read_bytes())
    try:
        head = (
            subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        head = None
    return {"git_head": head, "lazyvic_sources_sha1": h.hexdigest()[:12]}


def rate_cell(d: dict | None, key: str, fmt: str, spread_fmt: str = ".0f") -> str:
    """A table cell for one runtime's summary ``d`` (median ``d[key]``, spread min..max over
    ``d["n"]`` processes): "-" when it did not run, "error" when it failed."""
    if not d:
        return "-"
    if "error" in d:
        return "error"
    spread = f" ({d['min']:{spread_fmt}}..{d['max']:{spread_fmt}})" if d["n"] > 1 else ""
    return f"{d[key]:{fmt}}{spread}"


def write_json(path: Path, payload: dict, default=None) -> None:
    """Write ``payload`` to ``path`` whole or not at all (a temporary file renamed over it);
    ``default`` converts what JSON cannot hold (``json.dumps``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=default) + "\n")
    tmp.replace(path)


def busy_process() -> subprocess.Popen:
    """A Python process spinning on one core (kill it when done): the load of a shared machine."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def counter_delta(after: dict, before: dict) -> dict:
    """The change of numeric counters (``lazyvic.metrics.snapshot()``) from ``before`` to ``after``:
    only the counters that changed; floats rounded to 1e-6."""
    out = {}
    for k, v in after.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            d = v - before.get(k, 0)
            if d:
                out[k] = round(d, 6) if isinstance(d, float) else d
    return out
