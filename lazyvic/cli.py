"""The ``lazyvic`` command line.

    lazyvic explain SCRIPT.py [args ...]          run a script under lazyvic.explain, print the report
    lazyvic viz SCRIPT.py [args ...] --out DIR    draw the plans a script runs (lazyvic.tools.viz)
    lazyvic run -n N SCRIPT.py [args ...]         run a script on N processes under MPI (torchrun's equivalent,
                                                  lazyvic.distributed.run; -m MODULE, --hostfile, --mpirun, --mpi-arg)
    lazyvic onnx check MODEL.onnx                 opset, inputs/outputs, op histogram, what lazyvic supports
    lazyvic onnx run MODEL.onnx --input NAME=FILE.npy ... [--output OUT.npz] [--compare-ort]
    lazyvic onnx convert MODEL.onnx OUT.safetensors            import, save in lazyvic format v1
    lazyvic onnx export MODULE:FACTORY OUT.onnx --input-shape 1,3,32,32 [...]

Errors (a missing file, an invalid model, a bad ``--input``) print one line on stderr and exit
with status 1 (2 for command-line usage errors, as argparse does).

``python -m lazyvic.cli`` works the same where the console script is not installed.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path


def _run_script(script: str, script_args: list[str]) -> None:
    """Run ``script`` as ``__main__`` with ``sys.argv`` set as if it were started directly."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _explain(args) -> int:
    from lazyvic.tools.explain import explain

    report = explain(_run_script, args.script, args.args)
    report.name = args.script
    print(report)
    return 0


def _viz(args) -> int:
    # ``--out DIR`` may come after the script's arguments: take a trailing one back.
    rest = list(args.args)
    if len(rest) >= 2 and rest[-2] == "--out":
        args.out, rest = rest[-1], rest[:-2]
    elif rest and rest[-1].startswith("--out="):
        args.out, rest = rest[-1].split("=", 1)[1], rest[:-1]
    args.args = rest
    try:
        from lazyvic.tools.viz import viz_script
    except ImportError as e:
        print(
            f"lazyvic viz: the visualizer is not available ({e}); lazyvic.tools.viz.viz_script is needed",
            file=sys.stderr,
        )
        return 2
    path = viz_script(args.script, args.args, args.out)
    print(path)
    return 0


def _parser() -> argparse.ArgumentParser:
    from lazyvic.distributed import run as distributed_run
    from lazyvic.tools import onnx_cli

    parser = argparse.ArgumentParser(
        prog="lazyvic", description="Look inside lazyvic programs, and run them on several processes."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("explain", help="run a script under lazyvic.explain and print the report")
    p.add_argument("script", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.set_defaults(func=_explain)
    p = sub.add_parser("viz", help="draw the plans a script runs (SVG files in --out)")
    p.add_argument("--out", default="lazyvic-viz", help="output folder (default: lazyvic-viz)")
    p.add_argument("script", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.set_defaults(func=_viz)
    distributed_run.add_parser(sub)
    onnx_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``lazyvic`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
