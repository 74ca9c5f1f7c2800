"""Standard-library helpers shared by the benchmark harnesses (imports neither lazyvic nor
torch, so a parent process can use them)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUIET_CORES = 0.3  # a child starts once other processes use less than this (or after --max-wait)


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


# ---------------------------------------------------------------------- CPU load
def loadavg():
    """The 1-minute load average, or None where the system has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _descendants_cpu_s(hz: int) -> float:
    """CPU seconds of the live descendants of this process (torch.compile's compile workers)."""
    parent, cpu = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone in between
            continue
        parent[int(d)] = int(fields[1])
        cpu[int(d)] = (int(fields[11]) + int(fields[12])) / hz
    mine, total = {os.getpid()}, 0.0
    changed = True
    while changed:
        changed = False
        for pid, pp in parent.items():
            if pp in mine and pid not in mine:
                mine.add(pid)
                total += cpu[pid]
                changed = True
    return total


def cpu_sample(descendants: bool = True):
    """(wall s, busy CPU s of the whole machine, CPU s of this process and its children);
    busy is None off Linux. ``descendants``: the live descendants' CPU counts as this process's
    (else only the children it waited for).

    Busy counts user, nice, system, irq, softirq and steal (the hypervisor running someone
    else) from /proc/stat, in clock ticks (10 ms).
    """
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system
    try:
        hz = os.sysconf("SC_CLK_TCK")
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        busy = (sum(v) - v[3] - v[4]) / hz  # all but idle and iowait
        if descendants:
            own += _descendants_cpu_s(hz)
    except (OSError, ValueError, IndexError, AttributeError):
        busy = None
    return time.perf_counter(), busy, own


def other_cores(a, b):
    """Cores' worth of CPU used by other processes (not this one, not its counted children)
    between samples ``a`` and ``b``: 0 on an otherwise idle machine, up to the number of cores
    (the busy process of the loaded rows included); None where it cannot be read. Approximate:
    a child that exits in between counts as 'other'."""
    if a[1] is None or b[1] is None or b[0] <= a[0]:
        return None
    return max(0.0, (b[1] - a[1]) - (b[2] - a[2])) / (b[0] - a[0])


def wait_for_quiet(max_wait_s: float, threshold: float = QUIET_CORES, descendants: bool = True) -> tuple:
    """Sleep until other processes use less than ``threshold`` cores over one second, or
    ``max_wait_s`` has passed. Returns (seconds waited, other cores in the last second)."""
    t0 = time.perf_counter()
    while True:
        a = cpu_sample(descendants)
        time.sleep(1.0)
        other = other_cores(a, cpu_sample(descendants))
        waited = time.perf_counter() - t0
        if other is None or other < threshold or waited >= max_wait_s:
            return waited, other
        time.sleep(2.0)


# ---------------------------------------------------------------------- child processes
def run_child_process(script: Path, spec: dict, env_extra: dict, timeout_s: float) -> tuple:
    """Run ``script --child <spec as JSON> --child-out <file>`` in a fresh process (the environment
    plus ``env_extra``) and read the JSON record it writes to the file. Returns ``(record, stderr,
    seconds)``: on a non-zero exit the record is ``{"spec", "error", "stderr_tail"}`` (the last
    3,000 characters of stderr, else stdout); after ``timeout_s`` it is ``{"spec", "error"}`` and
    seconds is None."""
    env = dict(os.environ, **env_extra)
    fd, out_path = tempfile.mkstemp(prefix=f"{script.stem}-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, str(script), "--child", json.dumps(spec), "--child-out", out_path]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout or "")[-3000:]
            return (
                {"spec": spec, "error": f"child exited with {proc.returncode}", "stderr_tail": tail},
                proc.stderr,
                wall,
            )
        return json.loads(Path(out_path).read_text()), proc.stderr, wall
    except subprocess.TimeoutExpired:
        return {"spec": spec, "error": f"timed out after {timeout_s} s"}, "", None
    finally:
        Path(out_path).unlink(missing_ok=True)


def run_quiet_child(script: Path, spec: dict, env_extra: dict, timeout_s: float, max_wait_s) -> dict:
    """``run_child_process`` once the machine is quiet: first ``wait_for_quiet(max_wait_s)``
    (None: start at once, without sampling the load), then the child. The record gets
    ``process_wall_s`` (seconds the child ran; absent after a timeout), ``quiet_wait_s`` and
    ``other_cores_before`` (the load seen last before starting it, or None)."""
    waited, other_before = wait_for_quiet(max_wait_s) if max_wait_s is not None else (0.0, None)
    rec, _, wall = run_child_process(script, spec, env_extra, timeout_s)
    if wall is not None:
        rec["process_wall_s"] = wall
    rec["quiet_wait_s"], rec["other_cores_before"] = round(waited, 1), other_before
    return rec


def add_harness_args(ap, parts: tuple, iters_help: str, busy: bool = True) -> None:
    """The options every child-process harness takes (resnet18.py, convnets.py, rnn.py):
    ``--quick``, ``--only`` one of ``parts``, ``--reps``, ``--iters`` (``iters_help`` gives its
    defaults), ``--max-wait``, ``--busy`` (when the harness has it), ``--json`` and
    ``--keep-onnx``."""
    from pathlib import Path as _Path

    ap.add_argument("--quick", action="store_true", help="one process per runtime and case, no quiet wait")
    ap.add_argument("--only", choices=parts, help="run one part only")
    ap.add_argument("--reps", type=int, help="processes per runtime and case (default 3; quick 1)")
    ap.add_argument("--iters", type=int, help=f"timed calls or steps per process, at least ({iters_help})")
    ap.add_argument(
        "--max-wait",
        type=float,
        metavar="S",
        help="before each child, wait up to S seconds for a quiet machine (default 60; quick 0)",
    )
    if busy:
        ap.add_argument("--busy", action="store_true", help="also measure every case with one core busy")
    ap.add_argument("--json", type=_Path, help="write every record and the summary here")
    ap.add_argument("--keep-onnx", type=_Path, metavar="DIR", help="write the ONNX files here (default: a temp dir)")
