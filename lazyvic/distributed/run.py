"""Start a data-parallel job: ``lazyvic run``, lazyvic's ``torchrun``.

Usage::

    lazyvic run [-n N] [--hostfile FILE] [--mpirun PATH] [--mpi-arg ARG ...] script.py [script args ...]
    lazyvic run [-n N] ... -m package.module [module args ...]
    python -m lazyvic.distributed.run ...              (the same, without the console script)

Options:

``-n N``, ``--nproc-per-node N`` (also ``--nproc_per_node``)
    Processes to start (default 1).
``-m``, ``--module``
    Run a module as ``python -m`` does, instead of a script file.
``--hostfile FILE``
    Passed to the MPI launcher: the hosts to run on. ``N`` is then mpirun's ``-n``, the total
    over the hosts placed by the file's slots (torchrun would start ``N`` on each node). The
    same Python environment must exist at the same path on every host, and Open MPI sends
    environment variables to other hosts only when told (``--mpi-arg=-x --mpi-arg=PYTHONPATH``).
``--mpirun PATH``
    The MPI launcher (default: ``mpirun``, else ``mpiexec``, found on ``PATH``).
``--mpi-arg ARG``
    One more argument for the launcher, repeatable; write ``--mpi-arg=--bind-to`` for one
    that starts with a dash.

Everything after the script (or module) goes to it, in ``sys.argv``. The launcher runs::

    mpirun -n N [--oversubscribe] [--bind-to none] [--hostfile FILE] [ARG ...] PYTHON -m lazyvic.distributed.run --child [-m] script.py args

where ``PYTHON`` is this interpreter (``sys.executable``). Open MPI refuses to start more
processes than the machine has cores, and to run as root: for Open MPI, ``--oversubscribe`` is
added when ``N`` is more than the cores this process may use (without ``--hostfile``, whose
slots say how many processes each host takes), ``--bind-to none`` unless an ``--mpi-arg`` binds
(Open MPI pins each rank to a core by default, which a busy core then slows; torchrun does not
pin), and ``OMPI_ALLOW_RUN_AS_ROOT=1`` and
``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`` are set when run as root. MPICH's ``mpiexec`` needs
neither.

In each process, before the script runs, the torchrun variables are set from the MPI
launcher's (Open MPI's ``OMPI_COMM_WORLD_*``; MPICH's ``PMI_RANK``, ``PMI_SIZE``,
``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS``; otherwise from MPI itself, through mpi4py):

- ``RANK``, ``WORLD_SIZE``: this process's rank and the number of processes;
- ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``: the same among the processes of this host;
- ``GROUP_RANK=0``: when all processes are on one host (it is not set otherwise);
- ``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT=29500``: when not set already, for scripts that
  read them; lazyvic does not use them (MPI's launcher connects the processes).

A script written for ``torchrun --nproc-per-node N script.py`` thus runs unchanged under
``lazyvic run -n N script.py``; :func:`lazyvic.distributed.init_process_group` takes the rank
and world size from MPI.

When the script raises on one rank (or exits with a non-zero status), that rank prints the
traceback with each line prefixed ``[rankR]:``, as PyTorch does, and aborts the whole job
(``MPI_Abort``), so that the other ranks do not wait in their next collective until the
deadline. Exit status: the launcher's, 0 when every rank finished, non-zero otherwise (128 + the
signal's number when it was killed by a signal); 1 with a one-line error when no MPI launcher
is found; 2 for command-line usage errors, as argparse does.
"""

from __future__ import annotations

import argparse
import os
import runpy
import shutil
import subprocess
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from lazyvic.distributed.process_group import node_ranks
from lazyvic.errors import DistributedError

CHILD = "--child"
INSTALL_HINT = "install Open MPI (apt-get install openmpi-bin libopenmpi-dev) or MPICH (apt-get install mpich)"

# (rank, size, local rank, local size): the variables each MPI launcher sets in its processes.
LAUNCHER_VARIABLES = {
    "Open MPI": (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    "MPICH": ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
}


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a number of processes >= 1, got {text!r}")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The launcher's options and positionals (shared by ``lazyvic run`` and ``python -m``)."""
    p.add_argument(
        "-n",
        "--nproc-per-node",
        "--nproc_per_node",
        dest="nproc",
        type=_positive,
        default=1,
        metavar="N",
        help="processes to start (default 1)",
    )
    p.add_argument("-m", "--module", action="store_true", help="run a module (as python -m) instead of a script")
    p.add_argument("--hostfile", metavar="FILE", help="the hosts to run on (passed to mpirun)")
    p.add_argument("--mpirun", metavar="PATH", help="the MPI launcher (default: mpirun or mpiexec on PATH)")
    p.add_argument(
        "--mpi-arg",
        dest="mpi_args",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for mpirun (repeatable; --mpi-arg=--flag for one that starts with a dash)",
    )
    p.add_argument("script", help="the Python script to run (with -m: the module)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")


def add_parser(sub) -> None:
    """Add ``run`` to the ``lazyvic`` parser's subparsers."""
    p = sub.add_parser(
        "run",
        help="run a script on N processes under MPI (torchrun's equivalent)",
        description="Run a script on N processes under MPI, with torchrun's environment variables.",
    )
    add_arguments(p)
    p.set_defaults(func=_launch_args)


# ----------------------------------------------------------------------------------------------
# The launcher: one mpirun for the whole job.


def find_mpirun(path: str | None = None) -> str:
    """The MPI launcher's path: ``path`` if given, else ``mpirun`` or ``mpiexec`` on ``PATH``.

    Raises:
        DistributedError: none found (the message says which packages provide one).
    """
    if path is not None:
        found = shutil.which(path)
        if found is None:
            raise DistributedError(f"no MPI launcher: {path!r} is not an executable; {INSTALL_HINT}")
        return found
    found = shutil.which("mpirun") or shutil.which("mpiexec")
    if found is None:
        raise DistributedError(f"no MPI launcher: neither mpirun nor mpiexec is on PATH; {INSTALL_HINT}")
    return found


def _is_open_mpi(mpirun: str) -> bool:
    """Whether ``mpirun`` is Open MPI's (``mpirun (Open MPI) 4.1.4``; MPICH's says ``HYDRA``)."""
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    text = out.stdout + out.stderr
    return "Open MPI" in text or "OpenRTE" in text


def _cores() -> int:
    """Processor cores this process may run on: Open MPI's default number of slots on this host
    (it counts cores, not hardware threads, so ``os.cpu_count()`` can be twice too many)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((topology / "physical_package_id").read_text(), (topology / "core_id").read_text()))
        except OSError:  # not Linux: count logical CPUs
            return len(cpus)
    return len(cores) or len(cpus)


def mpirun_command(
    nproc: int,
    script: str,
    args: Sequence[str] = (),
    *,
    module: bool = False,
    hostfile: str | None = None,
    mpirun: str | None = None,
    mpi_args: Sequence[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start ``script`` on ``nproc`` processes.

    Returns:
        ``(argv, env)``: ``env`` is ``os.environ`` plus Open MPI's run-as-root permission when
        that is needed.

    Raises:
        DistributedError: no MPI launcher found.
    """
    exe = find_mpirun(mpirun)
    env = dict(os.environ)
    cmd = [exe, "-n", str(nproc)]
    if _is_open_mpi(exe):
        if hostfile is None and nproc > _cores():
            cmd.append("--oversubscribe")
        if not any(a.startswith("--bind-to") for a in mpi_args):
            # Open MPI binds each rank to a core; with another process on that core the rank
            # cannot move (TinyGPT's captured 2-rank step, one core busy: 19.8 steps/s bound,
            # 26.0 unbound; quiet 55 and 60). torchrun does not bind either.
            cmd += ["--bind-to", "none"]
        if getattr(os, "geteuid", lambda: -1)() == 0:
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if hostfile is not None:
        cmd += ["--hostfile", hostfile]
    cmd += list(mpi_args)
    cmd += [sys.executable, "-m", "lazyvic.distributed.run", CHILD, *(["-m"] if module else []), script, *args]
    return cmd, env


def launch(
    nproc: int,
    script: str,
    args: Sequence[str] = (),
    *,
    module: bool = False,
    hostfile: str | None = None,
    mpirun: str | None = None,
    mpi_args: Sequence[str] = (),
) -> int:
    """Run ``script`` (or ``module``) on ``nproc`` processes and wait for the job.

    Returns:
        The launcher's exit status (0 when every rank finished; 128 + signal when killed).

    Raises:
        DistributedError: no MPI launcher found.
    """
    cmd, env = mpirun_command(nproc, script, args, module=module, hostfile=hostfile, mpirun=mpirun, mpi_args=mpi_args)
    proc = subprocess.Popen(cmd, env=env)
    try:
        status = proc.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached mpirun too (one process group); it stops the ranks: wait for it to finish.
        status = proc.wait()
    return status if status >= 0 else 128 - status


def _launch_args(args: argparse.Namespace) -> int:
    try:
        return launch(
            args.nproc,
            args.script,
            args.args,
            module=args.module,
            hostfile=args.hostfile,
            mpirun=args.mpirun,
            mpi_args=args.mpi_args,
        )
    except DistributedError as e:
        print(f"lazyvic run: error: {e}", file=sys.stderr)
        return 1


# ----------------------------------------------------------------------------------------------
# The child: inside each MPI process, set the torchrun variables and run the script.


def _launcher_ranks() -> tuple[int, int, int, int]:
    """(rank, size, local rank, local size) from the MPI launcher's variables, else from MPI."""
    for names in LAUNCHER_VARIABLES.values():
        if all(name in os.environ for name in names):
            return tuple(int(os.environ[name]) for name in names)
    try:
        from mpi4py import MPI
    except ImportError:
        return 0, 1, 0, 1  # no launcher, no MPI: a group of one
    world = MPI.COMM_WORLD
    return (world.Get_rank(), world.Get_size(), *node_ranks(world))


def set_torchrun_env() -> int:
    """Set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` (and ``GROUP_RANK``,
    ``MASTER_ADDR``, ``MASTER_PORT``) as the module docstring says; returns the rank."""
    rank, size, local_rank, local_size = _launcher_ranks()
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(local_rank), LOCAL_WORLD_SIZE=str(local_size)
    )
    if local_size == size:
        os.environ["GROUP_RANK"] = "0"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    return rank


def _abort(rank: int, status: int) -> int:
    """End the whole job from this rank: ``MPI_Abort`` once MPI is running. Before that, the
    exit status is enough (the launcher stops the job when a process fails), and starting MPI
    here could wait for ranks that never start it."""
    sys.stdout.flush()
    sys.stderr.flush()
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized():
        MPI.COMM_WORLD.Abort(status)
    return status


def _user_traceback(e: BaseException) -> list[str]:
    """The traceback's lines from the user's code on (without this module's and runpy's frames)."""
    tb = e.__traceback__
    here = os.path.abspath(__file__)

    def ours(frame) -> bool:  # runpy's frames are frozen ("<frozen runpy>"): known by module name
        return frame.f_globals.get("__name__") == "runpy" or os.path.abspath(frame.f_code.co_filename) == here

    while tb is not None and tb.tb_next is not None and ours(tb.tb_frame):
        tb = tb.tb_next
    return traceback.format_exception(type(e), e, tb)


def _child(argv: list[str]) -> int:
    """``--child [-m] script args``: run the script as ``__main__`` in this MPI process."""
    module = bool(argv) and argv[0] == "-m"
    if module:
        argv = argv[1:]
    if not argv:
        print(f"lazyvic run: error: {CHILD} needs a script (or -m and a module)", file=sys.stderr)
        return 2
    rank = set_torchrun_env()
    target, args = argv[0], argv[1:]
    sys.argv = [target, *args]
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)  # sets sys.argv[0] to the file
        else:
            if not getattr(sys.flags, "safe_path", False):
                sys.path[0] = os.path.dirname(os.path.abspath(target))  # as `python script.py` does
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        if e.code is None or e.code == 0:
            return 0
        status = e.code if isinstance(e.code, int) else 1
        reason = f"exited with status {e.code}" if isinstance(e.code, int) else str(e.code)
        print(f"[rank{rank}]: {reason}", file=sys.stderr)
        return _abort(rank, status)
    except BaseException as e:  # KeyboardInterrupt too: every rank must stop
        lines = "".join(_user_traceback(e)).splitlines()
        print("\n".join(f"[rank{rank}]: {line}" for line in lines), file=sys.stderr)
        return _abort(rank, 1)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m lazyvic.distributed.run``: launch the job (or, with ``--child``, run one rank of
    it); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == CHILD:
        return _child(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m lazyvic.distributed.run",
        description="Run a script on N processes under MPI, with torchrun's environment variables.",
    )
    add_arguments(parser)
    return _launch_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
