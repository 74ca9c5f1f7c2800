"""lazyvic model format v1: a safetensors file whose metadata says how to rebuild the object.

File layout (the safetensors format, https://github.com/huggingface/safetensors#format):

    bytes 0..8        N, the header size: unsigned 64-bit little-endian integer
    bytes 8..8+N      the header: UTF-8 JSON, padded with spaces to a multiple of 8 bytes
                      {"__metadata__": {str: str}, "<tensor name>": {"dtype": "F32",
                       "shape": [...], "data_offsets": [begin, end]}, ...}
    bytes 8+N..       raw tensor data, C order, little-endian; offsets are relative to 8+N

Any safetensors reader opens the file. The ``__metadata__`` strings lazyvic writes:

    format           "lazyvic"
    format_version   "1"
    kind             "module" (an ``nn.Module``) or "state" (a tensor or a container)
    dtypes           JSON {tensor name: lazyvic dtype name} (any of lazyvic.dtypes.ALL)
    class            kind "module": "<module path>.<qualname>" of the module's class
    config           kind "module": JSON of ``module.config`` when that is a dict, else "null"
    structure        kind "state": JSON tree of the saved object (below)

Tensor names are the ``state_dict()`` keys for a module and dotted paths for a container
(``{"state": {0: {"exp_avg": t}}}`` stores ``t`` as "state.0.exp_avg"; a bare tensor is
"tensor"). In ``structure`` every JSON object is a one-key tag, so nothing in the user's
data can be mistaken for one:

    {"__tensor__": name}              a tensor (one name per distinct Tensor or array object)
    {"__dict__": [[key, value], ...]} a dict, in insertion order; keys stay int or str
    {"__tuple__": [value, ...]}       a tuple (a JSON array is a list)
    {"__float__": "inf" | "-inf" | "nan"}
    JSON strings, ints, finite floats, true/false, null: themselves

All JSON is written with sorted keys, fixed separators and ASCII escapes, and the
safetensors header is rewritten with its metadata keys sorted (safetensors itself writes
them in hash order), so the same weights and the same object give byte-identical files.

This module also holds what every lazyvic file reader and writer shares (``torch.py``, the ONNX
package): the load limit and the atomic write.

Load limit
    A file may make a loader allocate one copy of the data it holds (widened to a lazyvic dtype
    where the reader says so) and at most :func:`load_limit` bytes more: a decompressed pickle, a
    tensor larger than its storage (stride 0, overlapping views), constants an ONNX graph folds
    from a few bytes. The limit is ``max_bytes=`` where a loader takes it, else the environment
    variable ``LAZYVIC_MAX_LOAD_BYTES`` (bytes, with an optional K/M/G/T suffix, or ``inf``), else
    ``max(DEFAULT_MAX_LOAD_BYTES, size of the file)`` (256 MiB, or the file's own size when
    larger). Loaders check it before they allocate and raise :class:`CheckpointError` (or
    ``OnnxError``) naming the file, what would be allocated and the limit.

Atomic writes
    :func:`save`, ``interop.torch.save``/``save_safetensors`` and ``onnx.export`` write to a
    temporary file ``.<name>.lazyvic-<pid>-<8 hex digits>.tmp`` beside the target, fsync it and
    rename it over the target. A process killed mid-write leaves its temporary file behind; the
    next save to the same target removes such leftovers of that target (and only those: the exact
    name pattern, a regular file, not written to for ``STALE_TEMP_AGE_S`` seconds, and not locked:
    writers hold an ``flock`` on their temporary file while they write). Where ``fcntl.flock`` is
    missing (Windows) nothing is removed.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import re
import secrets
import stat
import time
from collections.abc import Mapping

import ml_dtypes
import numpy as np
import safetensors
import safetensors.numpy

from lazyvic import dtypes as dt
from lazyvic.errors import CheckpointError, DTypeError
from lazyvic.nn.module import Module
from lazyvic.runtime.device import canonical
from lazyvic.tensor import Tensor

try:
    import fcntl
except ImportError:  # Windows: no flock, so leftover temporary files are never removed
    fcntl = None

FORMAT_NAME = "lazyvic"
FORMAT_VERSION = 1
KINDS = ("module", "state")

# ------------------------------------------------------------------ load limit

LOAD_LIMIT_ENV = "LAZYVIC_MAX_LOAD_BYTES"
# 256 MiB: far above what real checkpoints and models make beyond their own data (an expanded
# position-ids buffer, a folded attention mask, a pickle of a few MB), far below what a few
# hundred hostile bytes should be able to take from the machine.
DEFAULT_MAX_LOAD_BYTES = 256 * 2**20
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _parse_bytes(text: str, where: str) -> float:
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    if value in ("INF", "NONE", "UNLIMITED"):
        return math.inf
    unit = value[-1:] if value[-1:] in _UNITS else ""
    number = value[: len(value) - len(unit)].strip()
    if not number.isdigit():
        raise ValueError(
            f"{where}={text!r}: expected a number of bytes, optionally with a K, M, G or T suffix "
            f"(powers of 1024), or 'inf'"
        )
    return int(number) * _UNITS[unit]


def load_limit(file_bytes: int, max_bytes: float | None = None) -> float:
    """How many bytes a loader may allocate beyond one copy of a file's own data.

    ``max_bytes`` (a loader's keyword) when given, else ``LAZYVIC_MAX_LOAD_BYTES`` when set,
    else ``max(DEFAULT_MAX_LOAD_BYTES, file_bytes)``. ``math.inf`` (or ``inf`` in the variable)
    turns the limit off, for files you trust. Raises ValueError for a negative ``max_bytes`` or a
    variable that is not a byte count.
    """
    if max_bytes is not None:
        if not (isinstance(max_bytes, (int, float)) and max_bytes >= 0):
            raise ValueError(f"max_bytes={max_bytes!r}: expected a number of bytes >= 0, or math.inf")
        return max_bytes
    text = os.environ.get(LOAD_LIMIT_ENV)
    if text:
        return _parse_bytes(text, LOAD_LIMIT_ENV)
    return max(DEFAULT_MAX_LOAD_BYTES, int(file_bytes))


def _size_text(nbytes: float) -> str:
    if nbytes == math.inf:
        return "unlimited"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} bytes"


class LoadBudget:
    """The bytes one load (or one run of an imported ONNX graph) may still allocate beyond the file.

    ``charge(nbytes, what)`` is called before an allocation the file asks for; past the limit it
    raises ``error(message)`` naming ``what``, the total and the limit, and how to raise it.
    ``credit(nbytes)`` returns bytes the file's own data backs (a storage, once).
    """

    def __init__(self, limit: float, source: str, error=CheckpointError, scope: str = ""):
        self.limit, self.source, self.error = limit, source, error
        self.scope = scope or "this load may allocate beyond the file's own data"
        self.used = 0

    def charge(self, nbytes: int, what: str) -> None:
        used = self.used + int(nbytes)
        if used > self.limit:
            raise self.error(
                f"{self.source}: {what} would take {_size_text(nbytes)}, more than {self.scope} "
                f"({_size_text(self.limit)}, {_size_text(max(self.used, 0))} already used); if you trust "
                f"the file, raise the limit with max_bytes=... or the environment variable {LOAD_LIMIT_ENV} "
                f"(e.g. {LOAD_LIMIT_ENV}=8G)"
            )
        self.used = used

    def credit(self, nbytes: int) -> None:
        self.used -= int(nbytes)


# Where to point users whose file is some other checkpoint.
_OTHER_READERS = (
    "read plain safetensors files with safetensors.numpy.load_file (PyTorch .pt checkpoints are not this format)"
)


def _dumps(value) -> str:
    """Canonical JSON: the same value always gives the same string."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# ------------------------------------------------------------------------- save


def save(obj, path) -> None:
    """Write ``obj`` to ``path`` in lazyvic format v1 (layout in the module docstring).

    ``path``: a file path, or a binary file object open for writing (``open(p, "wb")``,
    ``io.BytesIO()``) — PyTorch's ``torch.save(obj, f)``; a file object gets the whole file in
    one ``write`` at its current position and is neither flushed nor closed.

    ``obj`` is an ``nn.Module`` (its ``state_dict()``, its class and its ``config`` dict
    if it has one), a Tensor, or a nested container — dicts with str or int keys, lists,
    tuples — of Tensors, NumPy arrays (of a lazyvic dtype, ml_dtypes.bfloat16 too) and JSON
    scalars (int, float incl. inf/nan, str, bool, None). NumPy scalars are stored as the
    Python scalar they hold; dicts come back as plain dicts, NumPy arrays as Tensors.

    The write to a path is atomic: the bytes go to a temporary file in the same directory, which
    is flushed, fsynced and renamed over ``path``; on any error the temporary file is removed and
    an existing file at ``path`` is left untouched.

    Raises:
        TypeError: an object of an unsupported type (names its place in ``obj``), a dict
            key that is not str or int, a container that contains itself, or a module
            ``config`` that is not JSON-serializable.
        DTypeError: (a TypeError) an array of a dtype lazyvic does not support.
        CheckpointError: ``obj`` is nested too deeply for Python (a RecursionError).
        OSError: the file cannot be written.
    """
    try:
        arrays, metadata = _flatten_module(obj) if isinstance(obj, Module) else _flatten_state(obj)
        chunks = _serialize(arrays, metadata)
    except RecursionError:
        raise CheckpointError(
            f"{_describe(path) if hasattr(path, 'write') else os.fspath(path)}: the object is nested too "
            "deeply to save (RecursionError); nothing was written"
        ) from None
    if hasattr(path, "write"):
        path.write(b"".join(chunks))
        return
    _write_atomic(os.fspath(path), chunks)


def _flatten_module(module: Module) -> tuple[dict, dict]:
    arrays, dtype_names = {}, {}
    for name, t in module.state_dict().items():
        arrays[name] = np.asarray(t.numpy(), order="C")  # keeps 0-d (ascontiguousarray would not)
        dtype_names[name] = t.dtype.name
    config = getattr(module, "config", None)
    try:
        config_json = _dumps(config if isinstance(config, dict) else None)
    except (TypeError, ValueError) as e:
        raise TypeError(f"save: {type(module).__name__}.config is not JSON-serializable: {e}") from None
    metadata = {
        "format": FORMAT_NAME,
        "format_version": str(FORMAT_VERSION),
        "kind": "module",
        "dtypes": _dumps(dtype_names),
        "class": _class_name(type(module)),
        "config": config_json,
    }
    return arrays, metadata


class _StateEncoder:
    """Walks a container once, collecting its arrays and returning its ``structure`` tree."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}
        self.dtype_names: dict[str, str] = {}
        self._name_of: dict[int, str] = {}  # id(Tensor or ndarray) -> tensor name
        self._open: set[int] = set()  # ids of the containers on the current path

    def encode(self, value, keys: tuple):
        if isinstance(value, (Tensor, np.ndarray)):
            return {"__tensor__": self._add_array(value, keys)}
        if isinstance(value, np.generic) and value.dtype.kind in "biuf":
            value = value.item()
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            value = float(value)
            return value if math.isfinite(value) else {"__float__": repr(value)}
        if isinstance(value, (Mapping, list, tuple)):
            if id(value) in self._open:
                raise TypeError(f"save: the {type(value).__name__} at {_where(keys)} contains itself")
            self._open.add(id(value))
            try:
                if isinstance(value, Mapping):
                    return {"__dict__": [[self._key(k, keys), self.encode(v, keys + (k,))] for k, v in value.items()]}
                items = [self.encode(v, keys + (i,)) for i, v in enumerate(value)]
                return {"__tuple__": items} if isinstance(value, tuple) else items
            finally:
                self._open.discard(id(value))
        hint = " (save a module on its own, or its state_dict())" if isinstance(value, Module) else ""
        raise TypeError(
            f"save: cannot store an object of type {type(value).__module__}.{type(value).__qualname__} "
            f"at {_where(keys)}{hint}; lazyvic format v1 holds Tensors, NumPy arrays, dicts with str "
            f"or int keys, lists, tuples, int, float, str, bool and None"
        )

    def _key(self, key, keys: tuple):
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise TypeError(
                f"save: dict key {key!r} of type {type(key).__name__} at {_where(keys)}: keys must be str or int"
            )
        return key if isinstance(key, str) else int(key)

    def _add_array(self, value, keys: tuple) -> str:
        if id(value) in self._name_of:  # the same object twice: store once, share on load
            return self._name_of[id(value)]
        if isinstance(value, Tensor):
            dtype, array = value.dtype, value.numpy()
        else:
            try:
                dtype = dt.get_dtype(value.dtype.newbyteorder("="))  # big-endian arrays too
            except DTypeError as e:
                raise DTypeError(f"save: array at {_where(keys)}: {e}") from None
            array = value
        name = ".".join(str(k) for k in keys) or "tensor"
        base, n = name, 0
        while name in self.arrays:  # dotted paths can collide: {"a.b": x} and {"a": {"b": y}}
            n += 1
            name = f"{base}~{n}"
        # safetensors copies raw memory from the data pointer: make it C-ordered and native
        # (np.ascontiguousarray would turn a 0-d array into shape (1,)).
        self.arrays[name] = np.asarray(array, dtype=dtype.np, order="C")
        self.dtype_names[name] = dtype.name
        self._name_of[id(value)] = name
        return name


def _where(keys: tuple) -> str:
    return "obj" + "".join(f"[{k!r}]" for k in keys)


def _flatten_state(obj) -> tuple[dict, dict]:
    encoder = _StateEncoder()
    structure = encoder.encode(obj, ())
    metadata = {
        "format": FORMAT_NAME,
        "format_version": str(FORMAT_VERSION),
        "kind": "state",
        "dtypes": _dumps(encoder.dtype_names),
        "structure": _dumps(structure),
    }
    return encoder.arrays, metadata


def _serialize(arrays: dict, metadata: dict) -> list:
    """The file as chunks: safetensors lays out the data, then the header is made canonical."""
    blob = safetensors.numpy.save(arrays, metadata=metadata)
    size = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8 : 8 + size])
    canonical = {"__metadata__": dict(sorted(metadata.items()))}
    canonical.update((k, v) for k, v in header.items() if k != "__metadata__")
    text = json.dumps(canonical, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    text += b" " * (-len(text) % 8)  # keep the data 8-byte aligned, as safetensors does
    return [len(text).to_bytes(8, "little"), text, memoryview(blob)[8 + size :]]


# The temporary file of an atomic write: ".<target name>.lazyvic-<pid>-<8 hex digits>.tmp".
_TEMP_INFIX = ".lazyvic-"
_TEMP_TAIL = re.compile(r"[0-9]+-[0-9a-f]{8}\.tmp\Z")
# A leftover is removed only once nothing has written to it for this long (and nothing holds its
# lock): it closes the gap between a writer creating its file and locking it.
STALE_TEMP_AGE_S = 60.0


def _write_atomic(path: str, chunks: list) -> None:
    """Write ``chunks`` to ``path`` through a locked temporary file, fsync, rename; see the module docstring."""
    directory, base = os.path.split(os.path.abspath(path))
    _remove_stale_temporaries(directory, base)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = os.path.join(directory, f".{base}{_TEMP_INFIX}{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o666)  # 0o666 & ~umask, like a plain open(path, "wb")
            break
        except FileExistsError:
            continue
    try:
        if fcntl is not None:
            with contextlib.suppress(OSError):  # a filesystem without locks: the age rule still holds
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
            if fcntl is not None:
                os.replace(tmp, path)  # while the lock is held: no cleaner ever sees it unlocked
        if fcntl is None:
            os.replace(tmp, path)  # Windows cannot rename a file that is still open
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # Make the rename itself durable; directories cannot be opened on every platform.
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _remove_stale_temporaries(directory: str, base: str) -> None:
    """Remove temporary files of ``base`` left by writers that died (see the module docstring)."""
    if fcntl is None:
        return
    prefix = f".{base}{_TEMP_INFIX}"
    try:
        entries = [e for e in os.scandir(directory) if e.name.startswith(prefix)]
    except OSError:
        return
    now = time.time()
    for entry in entries:
        if not _TEMP_TAIL.fullmatch(entry.name[len(prefix) :]):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or now - st.st_mtime < STALE_TEMP_AGE_S:
                continue
            fd = os.open(entry.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a live writer: BlockingIOError
            opened, now_there = os.fstat(fd), os.lstat(entry.path)
            if (opened.st_dev, opened.st_ino) == (now_there.st_dev, now_there.st_ino):
                os.unlink(entry.path)
        except OSError:
            pass
        finally:
            os.close(fd)


# ------------------------------------------------------------------------- load


def load(path, model: Module | None = None, map_location=None, weights_only: bool | None = None):
    """Read a lazyvic format v1 file written by :func:`save`, or a checkpoint written by
    ``torch.save`` (so that ``torch.load`` works under ``import lazyvic as torch``).

    A ``torch.save`` file (a zip archive or the legacy format, told by its first bytes) is read by
    :func:`lazyvic.interop.torch.load` with ``map_location`` as given (its restricted unpickler
    admits tensors, containers and NumPy arrays whatever ``weights_only`` says; a file holding
    other objects raises CheckpointError naming the refused global). With ``model``, the
    checkpoint must be a state_dict, loaded with ``model.load_state_dict`` (strict), and
    ``model`` is returned.

    ``weights_only`` is accepted for ``torch.load``'s signature and changes nothing: a lazyvic
    file is JSON and raw bytes, and loading it never runs code from it.

    ``path``: a file path, or a binary file object open for reading (``open(p, "rb")``,
    ``io.BytesIO``), read from its current position to its end; errors name its ``name``
    attribute when it has one.

    The header is validated before any tensor is decoded, and every tensor is decoded
    before a model is touched, so nothing is ever half-loaded.

    kind "state": returns the saved container rebuilt — dicts (int and str keys as saved),
    lists, tuples, scalars — with lazyvic Tensors of the saved dtypes in place of Tensors
    and arrays. Passing ``model`` is an error.

    kind "module": with ``model``, checks that its class is the recorded one, loads the
    weights with ``model.load_state_dict(..., strict=True)`` and returns ``model``. Without
    it, rebuilds the module as ``cls(**config)`` only when the recorded class lives in the
    ``lazyvic`` package and a config was recorded; lazyvic never imports other modules
    named in a file.

    Raises:
        CheckpointError: naming the file, when it is missing or unreadable; corrupt or
            truncated (too short, header size beyond the file, header not JSON, data
            beyond the end, safetensors cannot decode it); not a lazyvic format file;
            written by a newer lazyvic (format version above ``FORMAT_VERSION``); the
            model's class differs from the recorded one; the module cannot be rebuilt
            without ``model=``; ``load_state_dict`` finds missing, unexpected or
            mis-shaped keys (then no parameter is changed); the machine runs out of memory
            (a ``MemoryError``) or the saved structure is nested too deeply for Python (a
            ``RecursionError``) while reading it.
        DeviceError: ``map_location`` names an unknown device, or "cuda" without a GPU.

    What a file can make this allocate: its own bytes (read whole), one copy of its tensors, and
    the module its recorded lazyvic class builds from the recorded config, whose parameters are
    replaced by the file's tensors after the strict shape check. ``OnnxModule`` and lazyvic's
    layers create their parameters lazily, so a config naming huge shapes fails that check before
    anything that size exists (a constructor that computes with NumPy eagerly, such as
    ``Embedding``'s ``padding_idx`` mask, allocates what its config asks for).

    ``map_location`` (``torch.load``'s name): None or ``"cpu"`` (tensors on the CPU, as
    saved), ``"cuda"`` (the loaded tensors, or the rebuilt module, on the GPU), or a
    ``{"cpu": device}`` dict. With ``model``, the values go to the model's own device.
    """
    source = path
    path = _describe(path) if hasattr(path, "read") else os.fspath(path)
    blob = None
    if hasattr(source, "read"):
        blob = _read(source, path)
        head = blob[:16]
    else:
        try:
            with open(path, "rb") as f:
                head = f.read(16)
        except OSError:
            head = b""  # _read names the problem
    if _torch_format().is_checkpoint(head):
        return _load_torch(source if blob is None else blob, path, model, map_location)
    if isinstance(map_location, dict):
        map_location = map_location.get("cpu", "cpu")  # a lazyvic file holds host tensors
    device = canonical(map_location, "load") if map_location is not None else "cpu"
    try:
        return _load(source if blob is None else blob, path, model, device)
    except MemoryError:
        raise CheckpointError(f"{path}: ran out of memory while loading it (MemoryError)") from None
    except RecursionError:
        raise _corrupt(path, "its structure is nested too deeply for Python (RecursionError)") from None


def _torch_format():
    """``lazyvic.interop.torch``, imported when first needed (it imports this module)."""
    return importlib.import_module("lazyvic.interop.torch")


def _load_torch(source, path: str, model: Module | None, map_location):
    """:func:`load` of a ``torch.save`` file (``source``: its path or its bytes)."""
    fmt = _torch_format()
    obj = (
        fmt._load_bytes(path, source, map_location, False, None)
        if isinstance(source, bytes)
        else fmt.load(path, map_location)
    )
    if model is None:
        return obj
    if not isinstance(obj, Mapping):
        raise CheckpointError(
            f"{path}: a PyTorch checkpoint holding a {type(obj).__name__}, not a state_dict for model="
        )
    model.load_state_dict(obj)
    return model


def _load(source, path: str, model: Module | None, device: str):
    blob = source if isinstance(source, bytes) else _read(source, path)
    metadata = _parse_header(path, blob)
    kind = metadata["kind"]
    dtype_names = _json_field(path, metadata, "dtypes")
    tensors = _decode_tensors(path, blob, dtype_names)
    del blob
    if device != "cpu" and kind == "state":
        tensors = {name: t.to(device) for name, t in tensors.items()}
    if kind == "state":
        if model is not None:
            raise CheckpointError(
                f"{path} holds saved state (a tensor or a container), not a module; load it with "
                f"lazyvic.interop.load(path) and pass it to model.load_state_dict yourself"
            )
        return _StateDecoder(path, tensors).decode(_json_field(path, metadata, "structure"))
    module = _load_module(path, metadata, tensors, model)
    if model is None and device != "cpu":
        module.to(device)
    return module


def _describe(f) -> str:
    """How errors name a file object: its ``name`` (an open file's path), else its type."""
    name = getattr(f, "name", None)
    return str(name) if isinstance(name, (str, bytes, os.PathLike)) else f"<{type(f).__name__} object>"


def _read(source, path: str) -> bytes:
    """The bytes of ``source`` (a file object, read to its end, or the file at ``path``)."""
    if hasattr(source, "read"):
        try:
            blob = source.read()
        except OSError as e:
            raise CheckpointError(f"{path}: cannot read the file object: {e}") from None
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise CheckpointError(
                f"{path}: the file object gave {type(blob).__name__}, not bytes; open it in binary mode ('rb')"
            )
        return bytes(blob)
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read the file: {e}") from None


def _corrupt(path: str, why: str) -> CheckpointError:
    return CheckpointError(f"{path} is corrupt or truncated: {why}")


def _parse_header(path: str, blob: bytes) -> dict:
    """Check the safetensors framing and the lazyvic metadata; return the metadata."""
    if len(blob) < 8:
        raise _corrupt(path, f"{len(blob)} bytes, fewer than the 8-byte header size that starts a safetensors file")
    size = int.from_bytes(blob[:8], "little")
    if size > len(blob) - 8:
        raise _corrupt(path, f"the header size says {size} bytes but only {len(blob) - 8} follow it")
    try:
        header = json.loads(blob[8 : 8 + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _corrupt(path, f"the {size}-byte header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise _corrupt(path, f"the header is a JSON {type(header).__name__}, not an object")
    data_size = len(blob) - 8 - size
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            raise _corrupt(path, f"tensor {name!r} has no valid data_offsets in the header")
        if offsets[1] > data_size:
            raise _corrupt(
                path, f"tensor {name!r} ends at data byte {offsets[1]}, but the file holds only {data_size} data bytes"
            )

    metadata = header.get("__metadata__")
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT_NAME:
        raise CheckpointError(
            f"{path} is not a lazyvic format file (its safetensors metadata has no "
            f"format={FORMAT_NAME!r}); {_OTHER_READERS}"
        )
    version = metadata.get("format_version")
    if not (isinstance(version, str) and version.isdigit()):
        raise _corrupt(path, f"format_version is {version!r}, not a positive integer")
    if int(version) > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} was written by a newer lazyvic (format version {int(version)}); this lazyvic "
            f"reads format version {FORMAT_VERSION}: upgrade lazyvic to read it"
        )
    if int(version) < 1:
        raise _corrupt(path, f"format_version is {version!r}; versions start at 1")
    if metadata.get("kind") not in KINDS:
        raise _corrupt(path, f"kind is {metadata.get('kind')!r}, expected one of {KINDS}")
    return metadata


def _json_field(path: str, metadata: dict, field: str):
    try:
        return json.loads(metadata[field])
    except (KeyError, TypeError, ValueError):
        raise _corrupt(path, f"the metadata field {field!r} is missing or not JSON") from None


# safetensors' dtype codes (its format's table); safetensors.numpy has no BF16.
_SAFETENSORS_NP = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "I64": np.int64,
    "U64": np.uint64,
    "I32": np.int32,
    "U32": np.uint32,
    "I16": np.int16,
    "U16": np.uint16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}


def safetensors_arrays(blob: bytes) -> dict:
    """The tensors of a safetensors file's bytes as NumPy arrays (``safetensors.deserialize``
    checks the header and the offsets; bfloat16 becomes ``ml_dtypes.bfloat16``).

    Raises:
        KeyError: a dtype without a NumPy counterpart; safetensors' errors for a bad file.
    """
    out = {}
    for name, v in safetensors.deserialize(blob):
        dtype = np.dtype(_SAFETENSORS_NP[v["dtype"]])
        out[name] = np.frombuffer(v["data"], dtype=dtype).reshape(v["shape"])
    return out


def _decode_tensors(path: str, blob: bytes, dtype_names) -> dict:
    try:
        arrays = safetensors_arrays(blob)
    except Exception as e:  # SafetensorError, or a dtype NumPy does not know
        raise _corrupt(path, f"safetensors cannot decode it ({type(e).__name__}: {e})") from None
    if not isinstance(dtype_names, dict) or set(dtype_names) != set(arrays):
        raise _corrupt(path, "the tensors in the file do not match the metadata field 'dtypes'")
    tensors = {}
    for name in sorted(arrays):
        try:
            dtype = dt.get_dtype(dtype_names[name])
        except DTypeError:
            raise _corrupt(path, f"tensor {name!r} has dtype {dtype_names[name]!r} in the metadata") from None
        if arrays[name].dtype != dtype.np:
            raise _corrupt(path, f"tensor {name!r} is stored as {arrays[name].dtype}, the metadata says {dtype.name}")
        tensors[name] = Tensor(arrays.pop(name))
    return tensors


class _StateDecoder:
    """Rebuilds a ``structure`` tree; each tensor name becomes one shared Tensor."""

    def __init__(self, path: str, tensors: dict):
        self.path, self.tensors = path, tensors

    def decode(self, node):
        if isinstance(node, list):
            return [self.decode(v) for v in node]
        if not isinstance(node, dict):
            return node
        if len(node) != 1:
            raise _corrupt(self.path, f"structure node {node!r} is not a one-key tag")
        ((tag, body),) = node.items()
        if tag == "__tensor__" and body in self.tensors:
            return self.tensors[body]
        if tag == "__tuple__" and isinstance(body, list):
            return tuple(self.decode(v) for v in body)
        if tag == "__dict__" and isinstance(body, list):
            out = {}
            for item in body:
                if not (isinstance(item, list) and len(item) == 2 and type(item[0]) in (str, int)):
                    raise _corrupt(self.path, f"structure dict item {item!r} is not a [str or int key, value] pair")
                out[item[0]] = self.decode(item[1])
            return out
        if tag == "__float__" and body in ("inf", "-inf", "nan"):
            return float(body)
        raise _corrupt(self.path, f"structure node {_dumps(node)[:80]} is not a tensor, tuple, dict or float tag")


def _load_module(path: str, metadata: dict, tensors: dict, model: Module | None) -> Module:
    recorded = metadata.get("class")
    if not isinstance(recorded, str):
        raise _corrupt(path, "a module file without the metadata field 'class'")
    if model is not None:
        actual = _class_name(type(model))
        if actual != recorded:
            raise CheckpointError(f"{path} holds a {recorded}, but model is a {actual}")
        model.load_state_dict(tensors, strict=True)
        return model

    config = _json_field(path, metadata, "config")
    short = recorded.rpartition(".")[2]
    if not recorded.startswith("lazyvic.") or "<locals>" in recorded:
        raise CheckpointError(
            f"{path} holds a {recorded}, which is not a class of the lazyvic package; lazyvic does "
            f"not import modules named in a file: build the model and pass it, "
            f"load(path, model={short}(...))"
        )
    if not isinstance(config, dict):
        raise CheckpointError(
            f"{path} holds a {recorded} saved without a config dict, so it cannot be rebuilt: "
            f"build the model and pass it, load(path, model={short}(...))"
        )
    cls = _lazyvic_class(recorded)
    if not (isinstance(cls, type) and issubclass(cls, Module)):
        raise CheckpointError(
            f"{path} names class {recorded}, which is not an nn.Module class in this lazyvic; "
            f"pass load(path, model=...)"
        )
    try:
        model = cls(**config)
    except Exception as e:
        raise CheckpointError(
            f"{path}: cannot rebuild {recorded}(**config) with config {config}: {type(e).__name__}: {e}"
        ) from None
    model.load_state_dict(tensors, strict=True)
    return model


def _lazyvic_class(name: str):
    """The object at dotted ``name`` inside the lazyvic package, or None.

    The split between module path and qualname is not recorded, so try the longest
    importable module prefix first (only ever a ``lazyvic.`` module).
    """
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
        return obj
    return None
