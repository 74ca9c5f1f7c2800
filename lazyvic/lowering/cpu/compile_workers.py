"""Kernel compiles in worker processes: the kernels a new plan needs, compiled side by side.

Numba compiles one kernel at a time, holding the GIL (about 0.1 s per kernel of a TinyGPT
step, seconds for a kernel of hundreds of ops). When a plan needs at least
:data:`MIN_JOBS` kernels that neither this process nor Numba's disk cache has, this process
compiles some of them itself while worker processes compile the others into the disk cache,
from which this process then loads them (``lowering/cpu/kernel_cache.prefetch``).

Workers are plain subprocesses (``python -m lazyvic.lowering.cpu.compile_workers``), not
``multiprocessing`` ones: those would import the user's script again in each worker. They are
started at the first plan that needs them, kept for the next plans, and end when this process
closes their standard input (at exit, or when it dies). A job is one JSON line: the kernel
file, its module and function names, and its argument types; the answer one JSON line.
A worker that fails or dies costs nothing but time: its kernels are compiled here (and after a
worker died, this process starts no more).

``LAZYVIC_COMPILE_WORKERS`` sets the number of workers (0: compile everything in this
process); by default one fewer than the CPUs this process may use, at most 3.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

from numba import types

MIN_JOBS = 3  # fewer kernels to compile: here, one after the other (a worker's start costs ~0.5 s)
MAX_WORKERS = 3

# By NumPy dtype name: the kernels' arrays (half types as their uint16 bits) and scalars.
_NB = {
    "bool": types.boolean,
    "uint8": types.uint8,
    "int8": types.int8,
    "int16": types.int16,
    "uint16": types.uint16,
    "int32": types.int32,
    "uint32": types.uint32,
    "int64": types.int64,
    "uint64": types.uint64,
    "float32": types.float32,
    "float64": types.float64,
}


def signature_types(arg_dtypes: list, scalar_dtypes: list, packed_dtypes: list, sizes: bool) -> tuple:
    """The Numba argument types of a kernel: its arrays (``arg_dtypes``, dtype names), scalars,
    packed scalar arrays and, when ``sizes``, the int64 array of its size arguments."""
    return tuple(
        [types.Array(_NB[d], 1, "C") for d in arg_dtypes]
        + [_NB[d] for d in scalar_dtypes]
        + [types.Array(_NB[d], 1, "C") for d in packed_dtypes]
        + ([types.Array(types.int64, 1, "C")] if sizes else [])
    )


_workers: list = []
_broken: list = []  # a worker that died: this process compiles alone from then on
_lock = threading.Lock()  # guards _workers; one plan's compile uses the workers at a time


def worker_count() -> int:
    """How many worker processes compile kernels (``LAZYVIC_COMPILE_WORKERS``, see above)."""
    if _broken:
        return 0
    text = os.environ.get("LAZYVIC_COMPILE_WORKERS")
    if text is not None:
        try:
            return max(0, int(text))
        except ValueError:
            warnings.warn(
                f"LAZYVIC_COMPILE_WORKERS={text!r} is not a whole number; kernels compile in this process",
                RuntimeWarning,
                stacklevel=2,
            )
            return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(cpus - 1, MAX_WORKERS))


class Worker:
    """One worker process and the pipe to it."""

    def __init__(self):
        # The worker imports the lazyvic this process runs, wherever it was found.
        root = str(Path(__file__).resolve().parents[3])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lazyvic.lowering.cpu.compile_workers"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def compile(self, job: dict) -> bool:
        """Send one job and wait for its answer: True when the kernel is in the disk cache."""
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (OSError, ValueError):
            return False
        if not line:  # the worker ended
            return False
        try:
            return bool(json.loads(line).get("ok"))
        except ValueError:
            return False

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - at exit: a worker that does not end is killed
            self.proc.kill()


def _close_all() -> None:
    for w in _workers:
        w.close()
    _workers.clear()


atexit.register(_close_all)


def compile_side_by_side(jobs: list, compile_here) -> set:
    """Compile ``jobs`` (JSON-able dicts, see :func:`_serve`) with the workers, while this thread
    calls ``compile_here(k)`` for the jobs it takes itself. Whoever is free takes the next job
    in the list's order: give the longest first (their compile time follows their size; the
    longest first keeps one long job from finishing alone). Returns the positions of the jobs a
    worker compiled into the disk cache. Errors of ``compile_here`` propagate (after the
    workers' jobs finished)."""
    with _lock:
        # A worker that ended since the last plan (it could not start, or crashed) is broken:
        # this process compiles alone from then on.
        _broken.extend(w for w in _workers if not w.alive() and w not in _broken)
    n = min(worker_count(), len(jobs) - 1)
    if n <= 0:
        for k in range(len(jobs)):
            compile_here(k)
        return set()
    queue = collections.deque(range(len(jobs)))
    done: set = set()
    with _lock:
        _workers[:] = [w for w in _workers if w.alive()]
        while len(_workers) < n:
            try:
                _workers.append(Worker())
            except OSError:
                break
        workers = _workers[:n]

        def feed(worker):
            while True:
                try:
                    k = queue.popleft()
                except IndexError:
                    return
                if worker.compile(jobs[k]):
                    done.add(k)
                elif not worker.alive():  # it could not start (or crashed): do not start more
                    _broken.append(worker)
                    return

        threads = [threading.Thread(target=feed, args=(w,), daemon=True) for w in workers]
        for t in threads:
            t.start()
        try:
            while True:
                try:
                    k = queue.popleft()
                except IndexError:
                    break
                compile_here(k)
        finally:
            queue.clear()  # after an error here, the workers stop at their current job
            for t in threads:
                t.join()
            # A worker that died before it took a job (this thread took them all) is broken too:
            # without this, whether it counted depended on which thread reached the queue first.
            _broken.extend(w for w in workers if not w.alive() and w not in _broken)
    return done


def _serve(lines, out) -> None:
    """The worker's loop: per job ``{"path", "module", "name", "sig"}`` (a kernel, or a native
    segment of ``native.py``) import the kernel file,
    compile the function for the signature (:func:`signature_types`) into Numba's disk
    cache, answer ``{"ok": true}`` or ``{"ok": false, "error": ...}``."""
    from lazyvic.lowering.kernel_files import import_file

    for line in lines:
        try:
            job = json.loads(line)
            fn = getattr(import_file(job["module"], Path(job["path"])), job["name"])
            fn.compile(signature_types(*job["sig"]))
            sys.modules.pop(job["module"], None)
            answer = {"ok": True}
        except Exception as e:  # noqa: BLE001 - any failure: the parent compiles the kernel itself
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    # Answers go to the pipe the parent reads; anything else printing goes to stderr (closed).
    _answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr
    _serve(sys.stdin, _answers)
