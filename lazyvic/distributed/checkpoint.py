"""Sharded checkpoints: every rank writes a part, any number of ranks loads (``torch.distributed.checkpoint``).

The API is PyTorch Distributed Checkpoint's (``torch.distributed.checkpoint.save`` / ``load``,
https://pytorch.org/docs/stable/distributed.checkpoint.html): :func:`save` is called on every
rank with the same state dict, :func:`load` fills a state dict in place, and a checkpoint saved by
N ranks loads on M ranks, or in one process::

    import lazyvic.distributed.checkpoint as dcp

    state = {"model": model.state_dict(), "optim": opt.state_dict(), "epoch": epoch}
    dcp.save(state, checkpoint_id="ckpt/step-1000")  # every rank: each writes its part

    state = {"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 0}
    dcp.load(state, checkpoint_id="ckpt/step-1000")  # any world size, or no process group
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])

In data parallelism every rank holds a full replica; sharding splits the writing (and the size of
each file) between the ranks. Without a process group (or with ``no_dist=True``) one process
saves as world size 1.

Directory layout ("lazyvic sharded checkpoint", version 1)::

    <checkpoint_id>/index.json
    <checkpoint_id>/shard-00000-of-00002.safetensors    one per rank: shard-{rank:05d}-of-{world:05d}
    <checkpoint_id>/shard-00001-of-00002.safetensors

``index.json`` (ASCII JSON: one line per field, sorted, and one per tensor, in the state dict's order)::

    {"format": "lazyvic sharded checkpoint", "format_version": "1", "world_size": 2,
     "files": ["shard-00000-of-00002.safetensors", "shard-00001-of-00002.safetensors"],
     "structure": <the state dict's tree, as in lazyvic format v1>,
     "tensors": {
       "model.0.weight": {"dtype": "float32", "shape": [96, 64], "shards": [
           {"file": "shard-00000-of-00002.safetensors", "rows": [0, 48], "shape": [48, 64]},
           {"file": "shard-00001-of-00002.safetensors", "rows": [48, 96], "shape": [48, 64]}]},
       "model.0.bias": {"dtype": "float32", "shape": [96], "shards": [
           {"file": "shard-00000-of-00002.safetensors", "rows": [0, 96], "shape": [96]}]},
       "optim.state.0.exp_avg": ...}}

- ``files``: the shard files the save wrote, one per rank (a rank that owns no piece writes
  one with no tensors).
- Tensor names are the dotted key paths of lazyvic format v1 (``{"optim": {"state": {0:
  {"exp_avg": t}}}}`` stores ``t`` as "optim.state.0.exp_avg"; ``~1`` is appended where two paths
  collide). ``dtype`` is a lazyvic dtype name, ``shape`` the full tensor's shape.
- ``structure`` is lazyvic format v1's ``structure`` tree (:mod:`lazyvic.interop.format_v1`):
  ``{"__tensor__": name}`` where a tensor was, and every non-tensor value (ints such as an
  optimizer's ``step``, floats, strings, dicts, lists, tuples) itself.
- ``shards`` cover the tensor's rows (dim 0) exactly once: ``rows`` is ``[begin, end)`` and
  ``shape`` the piece's shape; a 0-d tensor has one shard with ``rows`` null. In the shard file
  the piece is the safetensors tensor of the same name (rows in C order, little-endian).
- Shard files are safetensors (https://github.com/huggingface/safetensors#format) whose
  ``__metadata__`` is ``{"format": "lazyvic sharded checkpoint", "format_version": "1",
  "rank": "<r>", "world_size": "<n>"}``.

Which rank writes what: a tensor of at least :data:`MIN_SPLIT_BYTES` with at least one dim is cut
along dim 0 into world-size near-equal row ranges (rank ``r``: rows ``r*n//W`` to
``(r+1)*n//W``; empty ranges are not written); smaller tensors and 0-d ones are written whole by
one rank, round-robin in the state dict's order. Non-tensor values are rank 0's.

Order of a save: rank 0 removes an old ``index.json``; every rank writes its shard file (an
atomic write, as every lazyvic file: a temporary file renamed over the target,
``format_v1._write_atomic``); the ranks confirm to each other that every shard is written; rank 0
writes ``index.json`` (atomically); the ranks learn that it did. So a directory whose
``index.json`` exists holds every shard it lists, and a save that failed or is under way has no
index. On several machines ``checkpoint_id`` must name a directory every rank sees (a shared
filesystem).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.distributed.collectives import all_gather_object, rebind
from lazyvic.distributed.process_group import group_of, is_initialized
from lazyvic.errors import ArgumentError, CheckpointError, UnsupportedOpError
from lazyvic.interop.format_v1 import (
    _SAFETENSORS_NP,
    LoadBudget,
    _corrupt,
    _dumps,
    _serialize,
    _StateDecoder,
    _StateEncoder,
    _write_atomic,
    load_limit,
)
from lazyvic.tensor import Tensor
from lazyvic.trace.node import Node

FORMAT_NAME = "lazyvic sharded checkpoint"
FORMAT_VERSION = 1
INDEX_NAME = "index.json"
# Below this a tensor is written whole by one rank: pieces of a few hundred bytes would cost
# more in headers and file operations than they save in writing.
MIN_SPLIT_BYTES = 16 * 2**10
_SHARD_NAME = re.compile(r"shard-[0-9]{5,}-of-[0-9]{5,}\.safetensors\Z")
_DTYPES = {d.name: d for d in dt.ALL}


def shard_name(rank: int, world_size: int) -> str:
    """The file rank ``rank`` of ``world_size`` writes: ``shard-{rank:05d}-of-{world:05d}.safetensors``."""
    return f"shard-{rank:05d}-of-{world_size:05d}.safetensors"


def _directory(checkpoint_id, what: str) -> str:
    if checkpoint_id is None:
        raise ArgumentError(f"{what}: checkpoint_id is required (the checkpoint's directory)")
    if not isinstance(checkpoint_id, (str, os.PathLike)):
        raise TypeError(f"{what}: checkpoint_id must be a path, got {type(checkpoint_id).__name__}")
    return os.fspath(checkpoint_id)


def _no_custom_storage(what: str, **given) -> None:
    for arg, value in given.items():
        if value is not None:
            raise UnsupportedOpError(
                f"{what}: {arg} is not supported (lazyvic writes one layout to a directory); pass checkpoint_id=path"
            )


# ------------------------------------------------------------------------- save


def save(
    state_dict: Mapping,
    *,
    checkpoint_id,
    storage_writer=None,
    planner=None,
    process_group=None,
    no_dist: bool = False,
) -> None:
    """Write ``state_dict`` to the directory ``checkpoint_id``, each rank its part (``torch.distributed.checkpoint.save``).

    Called on every rank of the default process group with the same state dict (a replica: the
    same tensor names, shapes and dtypes; non-tensor values are taken from rank 0). The layout and
    the order of the writes are in the module docstring.

    Args:
        state_dict: a dict of nested dicts (str or int keys), lists and tuples of lazyvic Tensors,
            NumPy arrays and JSON scalars (int, float incl. inf/nan, str, bool, None), e.g.
            ``{"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3}``.
        checkpoint_id: the directory (created if missing; an existing checkpoint in it is replaced).
        process_group: ``None`` or ``group.WORLD`` (the default group), or a group of ``new_group``.
        no_dist: save from this process alone, as world size 1 (also what happens when no process
            group is initialized).
        storage_writer, planner: PyTorch's; only ``None`` is supported.

    Raises:
        TypeError, DTypeError: (on the rank where it happens) a value lazyvic cannot store, as
            :func:`lazyvic.save`.
        OSError: (on the rank where it happens) a file cannot be written.
        CheckpointError: on the other ranks, naming the rank that failed and its error; the ranks'
            state dicts differ in their tensors; the state dict is nested too deeply. No
            ``index.json`` is left behind when any of these is raised.
        DistributedError: a rank did not answer within the process group's timeout.
    """
    what = "lazyvic.distributed.checkpoint.save"
    _no_custom_storage(what, storage_writer=storage_writer, planner=planner)
    directory = _directory(checkpoint_id, what)
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"{what}: state_dict must be a dict, got {type(state_dict).__name__}")
    g = None if no_dist or not is_initialized() else group_of(process_group, what)
    if g is None and not no_dist and is_initialized():
        raise ArgumentError(f"{what}: this process is not a member of process_group (GroupMember.NON_GROUP_MEMBER)")
    rank, world = (g.rank, g.size) if g is not None else (0, 1)

    failure, encoder, structure, entries = None, None, None, None
    try:
        os.makedirs(directory, exist_ok=True)
        if rank == 0:  # before any shard changes: a reader must not pair an old index with new shards
            try:
                os.unlink(os.path.join(directory, INDEX_NAME))
            except FileNotFoundError:
                pass
        encoder = _StateEncoder()
        try:
            structure = encoder.encode(state_dict, ())
        except RecursionError:
            raise CheckpointError(f"{what}: the state_dict is nested too deeply to save (RecursionError)") from None
        entries = [(name, list(a.shape), encoder.dtype_names[name]) for name, a in encoder.arrays.items()]
    except Exception as e:
        failure = e
    plans = _agree(g, failure, entries, "prepare its part of the save", what)
    for r, plan in enumerate(plans):
        if plan != entries:
            raise CheckpointError(f"{what}: {_first_difference(entries, plan, r)}; nothing was written")

    layout = _layout(entries, world)
    try:
        mine = {}
        for name, pieces in layout.items():
            for r, rows, _ in pieces:
                if r == rank:
                    a = encoder.arrays[name]
                    mine[name] = a if rows is None else a[rows[0] : rows[1]]
        metadata = {
            "format": FORMAT_NAME,
            "format_version": str(FORMAT_VERSION),
            "rank": str(rank),
            "world_size": str(world),
        }
        _write_atomic(os.path.join(directory, shard_name(rank, world)), _serialize(mine, metadata))
    except Exception as e:
        failure = e
    _agree(g, failure, None, f"write {shard_name(rank, world)}", what)  # the barrier after every shard

    if rank == 0:
        try:
            _write_atomic(os.path.join(directory, INDEX_NAME), [_index_json(world, structure, entries, layout)])
        except Exception as e:
            failure = e
    _agree(g, failure, None, f"write {INDEX_NAME}", what)


def _agree(g, failure: Exception | None, payload, step: str, what: str) -> list:
    """Every rank's ``payload``, once every rank reports whether its ``step`` succeeded (a
    collective: it is also the barrier between the steps of a save). The rank that failed raises
    its own exception, the others a CheckpointError naming it."""
    status = (
        ("ok", payload) if failure is None else ("error", f"could not {step} ({type(failure).__name__}: {failure})")
    )
    statuses = [status]
    if g is not None:
        statuses = [None] * g.size
        all_gather_object(statuses, status, group=g)
    if failure is not None:
        raise failure
    for r, (kind, body) in enumerate(statuses):
        if kind == "error":
            raise CheckpointError(f"{what}: rank {r} {body}; no index.json was written")
    return [body for _, body in statuses]


def _first_difference(mine: list, theirs: list, rank: int) -> str:
    for a, b in zip(mine, theirs):
        if a != b:
            return f"rank {rank}'s state_dict holds tensor {b[0]!r} {b[2]} {b[1]} where this rank's holds {a[0]!r} {a[2]} {a[1]}"
    return f"rank {rank}'s state_dict holds {len(theirs)} tensors, this rank's {len(mine)}"


def _layout(entries: list, world: int) -> dict:
    """{tensor name: [(rank, [begin, end] or None, piece shape), ...]}: who writes which rows."""
    layout, owner = {}, 0
    for name, shape, dtype_name in entries:
        nbytes = math.prod(shape) * np.dtype(_DTYPES[dtype_name].np).itemsize
        if shape and world > 1 and nbytes >= MIN_SPLIT_BYTES:
            n = shape[0]
            bounds = [(r, [r * n // world, (r + 1) * n // world]) for r in range(world)]
            layout[name] = [(r, rows, [rows[1] - rows[0], *shape[1:]]) for r, rows in bounds if rows[1] > rows[0]]
        else:
            layout[name] = [(owner, [0, shape[0]] if shape else None, list(shape))]
            owner = (owner + 1) % world
    return layout


def _index_json(world: int, structure, entries: list, layout: dict) -> bytes:
    """index.json's bytes: canonical JSON (format v1's), one line per field and per tensor entry."""
    tensors = []
    for name, shape, dtype_name in entries:
        shards = [{"file": shard_name(r, world), "rows": rows, "shape": s} for r, rows, s in layout[name]]
        tensors.append(f"  {_dumps(name)}: {_dumps({'dtype': dtype_name, 'shape': shape, 'shards': shards})}")
    fields = {
        "files": _dumps([shard_name(r, world) for r in range(world)]),
        "format": _dumps(FORMAT_NAME),
        "format_version": _dumps(str(FORMAT_VERSION)),
        "structure": _dumps(structure),
        "tensors": "{\n" + ",\n".join(tensors) + "\n }",
        "world_size": _dumps(world),
    }
    return ("{\n" + ",\n".join(f" {_dumps(k)}: {v}" for k, v in sorted(fields.items())) + "\n}\n").encode("ascii")


# ------------------------------------------------------------------------- load


def load(
    state_dict: dict,
    *,
    checkpoint_id,
    storage_reader=None,
    planner=None,
    process_group=None,
    no_dist: bool = False,
) -> None:
    """Fill ``state_dict`` in place from the checkpoint at ``checkpoint_id`` (``torch.distributed.checkpoint.load``).

    Works on any world size, and without a process group: each process reads the index and the
    shard pieces of the tensors it asks for, and needs no collective (ranks may load at different
    times). What is loaded, key by key of ``state_dict``:

    - a lazyvic Tensor (or NumPy array): takes the saved values in place, with no autograd
      history (a Tensor is rebound, as a collective's result; an array is written into). The
      checkpoint's shape and dtype must be the entry's.
    - a value that holds no tensor (a number such as ``"epoch"`` or an optimizer's int ``step``, a
      string, an empty dict such as a fresh optimizer's ``"state"``): replaced by the
      checkpoint's value there, whatever it is (its tensors come back as new CPU Tensors).
    - a dict, list or tuple that holds tensors: walked entry by entry (lists and tuples must have
      the saved length; a tuple is rebuilt). Checkpoint entries the state dict does not ask for
      are not read (PyTorch's rule).

    Then ``model.load_state_dict(state_dict["model"])`` and ``opt.load_state_dict(...)`` apply it.
    Everything is checked, every needed shard file's header included, before the first entry
    changes (only an I/O error while the data is read can leave some entries loaded).

    Args:
        state_dict: a dict, e.g. ``{"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 0}``.
        checkpoint_id: the directory :func:`save` wrote.
        process_group, no_dist: accepted for PyTorch's signature; loading needs no collective.
        storage_reader, planner: PyTorch's; only ``None`` is supported.

    Raises:
        CheckpointError: naming the file and the key, when ``index.json`` is missing (not a
            checkpoint, or its save did not finish), unreadable or malformed, or of a newer
            format version; a shard file it lists is missing, truncated or does not hold the
            piece the index says; a tensor's shards do not cover its rows exactly once; a tensor
            entry's shape or dtype differs from the checkpoint's; the checkpoint has no entry for a
            key of ``state_dict`` (or holds another kind of value there); loading would allocate
            more than the load limit beyond the files' own data (``LAZYVIC_MAX_LOAD_BYTES``, see
            :func:`lazyvic.interop.format_v1.load_limit`); memory runs out.
    """
    what = "lazyvic.distributed.checkpoint.load"
    _no_custom_storage(what, storage_reader=storage_reader, planner=planner)
    directory = _directory(checkpoint_id, what)
    if not isinstance(state_dict, dict):
        raise TypeError(f"{what}: state_dict must be a dict, got {type(state_dict).__name__}")
    shards = None
    try:
        index = _Index(directory)
        matcher = _Matcher(index)
        apply = matcher.mapping(state_dict, index.structure, ())
        shards = _Shards(index)
        shards.open(matcher.needed)
        apply(state_dict, shards)
    except MemoryError:
        raise CheckpointError(f"{directory}: ran out of memory while loading the checkpoint (MemoryError)") from None
    except RecursionError:
        raise CheckpointError(
            f"{directory}: the state_dict or the checkpoint's structure is nested too deeply (RecursionError)"
        ) from None
    finally:
        if shards is not None:
            shards.close()


class _Entry:
    """One tensor of the index: dtype, shape and [(file, rows or None, piece shape)]."""

    def __init__(self, dtype, shape: tuple, shards: list):
        self.dtype, self.shape, self.shards = dtype, shape, shards
        self.nbytes = math.prod(shape) * np.dtype(dtype.np).itemsize


class _Index:
    """``index.json``, read and checked whole (format, every tensor entry, the structure's references)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.path = os.path.join(directory, INDEX_NAME)
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise CheckpointError(
                f"{self.path}: no such file: {directory} is not a lazyvic sharded checkpoint, or its save "
                f"did not finish (the index is written last)"
            ) from None
        except OSError as e:
            raise CheckpointError(f"{self.path}: cannot read the file: {e}") from None
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise _corrupt(self.path, f"it is not JSON ({type(e).__name__}: {e})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
            raise CheckpointError(
                f"{self.path} is not the index of a lazyvic sharded checkpoint (expected a JSON object with "
                f"format={FORMAT_NAME!r})"
            )
        version = doc.get("format_version")
        if not (isinstance(version, str) and version.isdigit() and int(version) >= 1):
            raise _corrupt(self.path, f"format_version is {version!r}, expected a positive integer string")
        if int(version) > FORMAT_VERSION:
            raise CheckpointError(
                f"{self.path} was written by a newer lazyvic (sharded checkpoint version {int(version)}); this "
                f"lazyvic reads version {FORMAT_VERSION}: upgrade lazyvic to read it"
            )
        world = doc.get("world_size")
        if type(world) is not int or world < 1:
            raise _corrupt(self.path, f"world_size is {world!r}, expected an int >= 1")
        tensors = doc.get("tensors")
        if not isinstance(tensors, dict) or "structure" not in doc:
            raise _corrupt(self.path, "it needs the fields 'tensors' (an object) and 'structure'")
        self.world_size = world
        self.structure = doc["structure"]
        self.tensors = {name: self._entry(name, raw_entry) for name, raw_entry in tensors.items()}
        self.uses = Counter()
        self._count_references(self.structure)

    def _entry(self, name: str, raw) -> _Entry:
        def bad(why: str) -> CheckpointError:
            return _corrupt(self.path, f"tensor {name!r}: {why}")

        if not isinstance(raw, dict):
            raise bad(f"its entry is {raw!r}, expected an object with dtype, shape and shards")
        dtype = _DTYPES.get(raw.get("dtype")) if isinstance(raw.get("dtype"), str) else None
        if dtype is None:
            raise bad(f"dtype {raw.get('dtype')!r} is not a lazyvic dtype ({', '.join(_DTYPES)})")
        shape = _shape(raw.get("shape"))
        if shape is None:
            raise bad(f"shape {raw.get('shape')!r} is not a list of ints >= 0")
        shards = raw.get("shards")
        if not isinstance(shards, list) or not shards:
            raise bad("it has no list of shards")
        pieces = []
        for s in shards:
            if not isinstance(s, dict):
                raise bad(f"shard {s!r} is not an object with file, rows and shape")
            file, rows, piece = s.get("file"), s.get("rows"), _shape(s.get("shape"))
            if not (isinstance(file, str) and _SHARD_NAME.match(file)):
                raise bad(f"shard file {file!r} is not a name shard-NNNNN-of-NNNNN.safetensors in the checkpoint")
            ok_rows = rows is None or (isinstance(rows, list) and len(rows) == 2 and all(type(r) is int for r in rows))
            if not ok_rows or piece is None:
                raise bad(f"shard {s!r} needs rows [begin, end] (null for a 0-d tensor) and a shape")
            pieces.append((file, None if rows is None else tuple(rows), piece))
        if not shape:
            if len(pieces) != 1 or pieces[0][1] is not None or pieces[0][2] != ():
                raise bad(f"a 0-d tensor needs one shard with rows null and shape [], the index lists {shards}")
            return _Entry(dtype, shape, pieces)
        covered = sorted((rows, file, piece) for file, rows, piece in pieces if rows is not None)
        cursor, tiled = 0, len(covered) == len(pieces)
        for (begin, end), _, piece in covered:
            tiled = tiled and begin == cursor and end >= begin and piece == (end - begin, *shape[1:])
            cursor = end
        if not tiled or cursor != shape[0]:
            got = ", ".join(f"rows {r[0]}..{r[1]} {list(p)}" if r else "rows null" for f, r, p in pieces)
            piece_shape = ", ".join(["rows", *map(str, shape[1:])])
            raise CheckpointError(
                f"{self.path}: the shards of tensor {name!r} (shape {list(shape)}) do not cover it: expected row "
                f"ranges that tile rows 0..{shape[0]} exactly once, each of shape [{piece_shape}], got {got}"
            )
        return _Entry(dtype, shape, pieces)

    def _count_references(self, node) -> None:
        for name in _references(node):
            if not isinstance(name, str) or name not in self.tensors:
                raise _corrupt(self.path, f"the structure refers to tensor {name!r}, which 'tensors' does not list")
            self.uses[name] += 1


def _shape(raw) -> tuple | None:
    if isinstance(raw, list) and all(type(d) is int and d >= 0 for d in raw):
        return tuple(raw)
    return None


def _references(node):
    """The tensor names a structure tree refers to."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for tag, body in node.items():
                if tag == "__tensor__":
                    yield body
                elif tag in ("__dict__", "__tuple__"):
                    stack.append(body)


def _holds_tensor(value) -> bool:
    if isinstance(value, (Tensor, np.ndarray)):
        return True
    if isinstance(value, Mapping):
        return any(_holds_tensor(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    return False


class _Matcher:
    """Walks the state dict beside the saved structure, checking every entry; returns the
    function that fills the state dict (called once every needed shard is checked)."""

    def __init__(self, index: _Index):
        self.index = index
        self.needed: set[str] = set()  # the tensors the state dict asks for

    def _error(self, keys: tuple, why: str) -> CheckpointError:
        where = "state_dict" + "".join(f"[{k!r}]" for k in keys)
        return CheckpointError(f"{self.index.path}: {where} ({'.'.join(map(str, keys))!r}): {why}")

    def match(self, target, node, keys: tuple) -> Callable:
        if isinstance(target, (Tensor, np.ndarray)):
            return self.tensor(target, node, keys)
        if not _holds_tensor(target):
            names = set(_references(node))
            path = self.index.path
            _StateDecoder(path, dict.fromkeys(names)).decode(node)  # checks the tags now, before any change
            self.needed.update(names)

            def replace(value, shards):
                tensors = {n: _new_tensor(shards.array(n), self.index.tensors[n].dtype) for n in names}
                return _StateDecoder(path, tensors).decode(node)

            return replace
        if isinstance(target, Mapping):
            return self.mapping(target, node, keys)
        return self.sequence(target, node, keys)

    def tensor(self, target, node, keys: tuple) -> Callable:
        if not (isinstance(node, dict) and set(node) == {"__tensor__"}):
            raise self._error(keys, f"the state_dict holds a tensor, the checkpoint {_describe(node)}")
        name = node["__tensor__"]
        entry = self.index.tensors[name]
        dtype = target.dtype if isinstance(target, Tensor) else _DTYPES.get(dt.get_dtype(target.dtype).name)
        if entry.shape != tuple(target.shape) or entry.dtype is not dtype:
            raise self._error(
                keys,
                f"the checkpoint's tensor {name!r} has shape {list(entry.shape)} and dtype {entry.dtype.name}; "
                f"the state_dict's has shape {list(target.shape)} and dtype {dtype.name}",
            )
        if isinstance(target, np.ndarray) and not target.flags.writeable:
            raise self._error(keys, "the state_dict's NumPy array is read-only, so it cannot be loaded in place")
        self.needed.add(name)

        def fill(value, shards):
            values = shards.array(name)
            if isinstance(value, Tensor):
                rebind(value, values)  # loaded values are data, as in PyTorch's DCP
            else:
                np.copyto(value, values)
            return value

        return fill

    def mapping(self, target: Mapping, node, keys: tuple) -> Callable:
        body = node.get("__dict__") if isinstance(node, dict) and len(node) == 1 else None
        if not isinstance(body, list):
            raise self._error(keys, f"the state_dict holds a dict, the checkpoint {_describe(node)}")
        saved = {}
        for item in body:
            if not (isinstance(item, list) and len(item) == 2 and type(item[0]) in (str, int)):
                raise _corrupt(self.index.path, f"structure dict item {str(item)[:80]} is not a [key, value] pair")
            saved[item[0]] = item[1]
        steps = {}
        for k, v in target.items():
            if k not in saved:
                have = ", ".join(repr(s) for s in list(saved)[:8]) + (", ..." if len(saved) > 8 else "")
                raise self._error(keys + (k,), f"the checkpoint has no such key (there it has {have or 'no keys'})")
            steps[k] = self.match(v, saved[k], keys + (k,))

        def fill(value, shards):
            for k, step in steps.items():
                new = step(value[k], shards)
                if new is not value[k]:
                    value[k] = new
            return value

        return fill

    def sequence(self, target, node, keys: tuple) -> Callable:
        kind = "tuple" if isinstance(target, tuple) else "list"
        body = node.get("__tuple__") if kind == "tuple" and isinstance(node, dict) and len(node) == 1 else node
        if not isinstance(body, list) or (kind == "list" and not isinstance(node, list)):
            raise self._error(keys, f"the state_dict holds a {kind}, the checkpoint {_describe(node)}")
        if len(body) != len(target):
            raise self._error(keys, f"the checkpoint's {kind} has {len(body)} items, the state_dict's {len(target)}")
        steps = [self.match(v, n, keys + (i,)) for i, (v, n) in enumerate(zip(target, body))]

        def fill(value, shards):
            items = [step(v, shards) for step, v in zip(steps, value)]
            if isinstance(value, tuple):
                return type(value)(items) if type(value) is tuple else type(value)(*items)
            for i, new in enumerate(items):
                if new is not value[i]:
                    value[i] = new
            return value

        return fill


def _new_tensor(values: np.ndarray, dtype) -> Tensor:
    return Tensor._from_node(Node.buffer(values, dtype))


def _describe(node) -> str:
    if isinstance(node, list):
        return "holds a list"
    if isinstance(node, dict) and len(node) == 1:
        tag = next(iter(node))
        kind = {"__tensor__": "a tensor", "__dict__": "a dict", "__tuple__": "a tuple"}.get(tag)
        if kind:
            return f"holds {kind}"
    return f"holds the value {json.dumps(node)[:60]}"


class _Shards:
    """The shard files a load reads: headers checked and the load limit applied before any
    data is read, then each tensor assembled from its pieces' byte ranges."""

    def __init__(self, index: _Index):
        self.index = index
        self.files: dict[str, _ShardFile] = {}
        self.offsets: dict[tuple, int] = {}
        self.cache: dict[str, np.ndarray] = {}

    def open(self, names: set) -> None:
        first_user = {}
        for name in sorted(names):
            for file, _, _ in self.index.tensors[name].shards:
                first_user.setdefault(file, name)
        for file, name in sorted(first_user.items()):
            self.files[file] = _ShardFile(os.path.join(self.index.directory, file), self.index.path, name)
        total = os.path.getsize(self.index.path) + sum(f.size for f in self.files.values())
        budget = LoadBudget(
            load_limit(total),
            self.index.directory,
            scope="loading the checkpoint may allocate beyond its files' own data",
        )
        credited = defaultdict(int)  # per file, at most its data: pieces that overlap are paid for
        for name in sorted(names):
            entry = self.index.tensors[name]
            for file, _, piece in entry.shards:
                shard = self.files[file]
                offset, nbytes = shard.piece(name, entry.dtype, piece)
                self.offsets[name, file] = offset
                credit = min(nbytes, shard.data_size - credited[file])
                credited[file] += credit
                budget.credit(credit)
            budget.charge(entry.nbytes, f"tensor {name!r} ({entry.dtype.name} {list(entry.shape)})")

    def array(self, name: str) -> np.ndarray:
        """The whole tensor ``name``, read from its shards."""
        if name in self.cache:
            return self.cache[name]
        entry = self.index.tensors[name]
        out = np.empty(entry.shape, dtype=entry.dtype.np)
        for file, rows, _ in entry.shards:
            part = out if rows is None else out[rows[0] : rows[1]]
            self.files[file].read_into(self.offsets[name, file], part, name)
        if self.index.uses[name] > 1:  # one tensor under several keys: read it once
            self.cache[name] = out
        return out

    def close(self) -> None:
        for f in self.files.values():
            f.close()


class _ShardFile:
    """One safetensors shard file: its header, read and checked; pieces read by byte range."""

    def __init__(self, path: str, index_path: str, user: str):
        self.path = path
        try:
            self.f = open(path, "rb")
        except FileNotFoundError:
            raise CheckpointError(
                f"{path}: no such file; {index_path} lists it as a shard of tensor {user!r}"
            ) from None
        except OSError as e:
            raise CheckpointError(f"{path}: cannot read the file ({index_path} lists it for {user!r}): {e}") from None
        try:
            self.size = os.fstat(self.f.fileno()).st_size
            head = self.f.read(8)
            if len(head) < 8:
                raise _corrupt(path, f"{len(head)} bytes, fewer than the 8-byte header size of a safetensors file")
            n = int.from_bytes(head, "little")
            if n > self.size - 8:
                raise _corrupt(path, f"the header size says {n} bytes but only {self.size - 8} follow it")
            try:
                self.header = json.loads(self.f.read(n).decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as e:
                raise _corrupt(path, f"the {n}-byte safetensors header is not JSON ({e})") from None
            metadata = self.header.get("__metadata__") if isinstance(self.header, dict) else None
            if not isinstance(metadata, dict) or metadata.get("format") != FORMAT_NAME:
                raise CheckpointError(
                    f"{path} is not a shard of a lazyvic sharded checkpoint (no format={FORMAT_NAME!r})"
                )
            self.data_start, self.data_size = 8 + n, self.size - 8 - n
        except BaseException:
            self.f.close()
            raise

    def piece(self, name: str, dtype, shape: tuple) -> tuple[int, int]:
        """(file offset, bytes) of tensor ``name``'s piece, checked against the index's dtype and shape."""
        info = self.header.get(name)
        expected = f"a {dtype.name} piece of shape {list(shape)} (as the index says)"
        if not isinstance(info, dict):
            raise CheckpointError(f"{self.path}: holds no tensor {name!r}; expected {expected}")
        stored = _SAFETENSORS_NP.get(info.get("dtype"))
        nbytes = math.prod(shape) * np.dtype(dtype.np).itemsize
        offsets = info.get("data_offsets")
        if stored is None or np.dtype(stored) != np.dtype(dtype.np) or _shape(info.get("shape")) != shape:
            raise CheckpointError(
                f"{self.path}: tensor {name!r} is stored as {info.get('dtype')} {info.get('shape')}; expected {expected}"
            )
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            raise _corrupt(self.path, f"tensor {name!r} has no valid data_offsets")
        begin, end = offsets
        if not (0 <= begin and end - begin == nbytes and end <= self.data_size):
            raise _corrupt(
                self.path,
                f"tensor {name!r} has data_offsets {offsets} for {nbytes} bytes, in {self.data_size} data bytes",
            )
        return self.data_start + begin, nbytes

    def read_into(self, offset: int, part: np.ndarray, name: str) -> None:
        view = memoryview(part.reshape(-1).view(np.uint8))
        self.f.seek(offset)
        done = 0
        while done < len(view):
            got = self.f.readinto(view[done:])
            if not got:
                raise _corrupt(self.path, f"tensor {name!r} ends after {done} of its {len(view)} bytes")
            done += got

    def close(self) -> None:
        self.f.close()


__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "INDEX_NAME", "MIN_SPLIT_BYTES", "load", "save", "shard_name"]
