"""PyTorch checkpoints (``.pt`` files written by ``torch.save``) without PyTorch.

lazyvic never imports ``torch``: :func:`load` decodes the pickle with a restricted
unpickler and :func:`save` writes the pickle opcodes ``torch.load`` expects. The formats
are those of PyTorch's ``torch/serialization.py`` (``_save``/``_load`` for the zip
format, ``_legacy_save``/``_legacy_load`` for the legacy one) and
``caffe2/serialize/inline_container.h`` (the zip container).

Zip format (PyTorch >= 1.6, the default of ``torch.save``)
    A zip archive whose records are all ZIP_STORED (uncompressed) and named
    ``<archive>/...``, where ``<archive>`` is the file stem when torch wrote it:

        <archive>/data.pkl                 the object, pickle protocol 2
        <archive>/byteorder                "little" or "big" (absent before torch 1.10: little)
        <archive>/data/<key>               raw bytes of storage <key>, C order
        <archive>/version                  "3\\n" (torch 2.x)
        <archive>/.format_version          "1"  (torch >= 2.4; ignored)
        <archive>/.storage_alignment       "64" (torch >= 2.4; data records start on a
                                           64-byte boundary, padded with a zip extra field)
        <archive>/.data/serialization_id   (torch >= 2.4; ignored)

    In ``data.pkl`` each tensor is ``torch._utils._rebuild_tensor_v2(storage,
    storage_offset, size, stride, requires_grad, backward_hooks)`` — or, for dtypes that
    have no typed storage class (uint16, uint32, uint64), ``_rebuild_tensor_v3(...,
    dtype)`` over a ``torch.storage.UntypedStorage`` — and ``storage`` is a persistent id
    ``('storage', torch.FloatStorage, key, location, numel)`` (numel counts elements of
    the storage type; bytes for UntypedStorage). ``nn.Parameter`` wraps a tensor in
    ``torch._utils._rebuild_parameter(tensor, requires_grad, backward_hooks)``.

Legacy format (``torch.save(..., _use_new_zipfile_serialization=False)``, PyTorch < 1.6)
    Consecutive pickles (protocol 2) then raw storage data:

        pickle  magic number 0x1950a86a20f9469cfc6c
        pickle  protocol version 1001
        pickle  sys info {"protocol_version": 1001, "little_endian": bool, "type_sizes": {...}}
        pickle  the object; persistent ids ('storage', storage_type, root_key, location,
                size, view_metadata), view_metadata None or (view_key, offset, view_size)
        pickle  the list of storage keys
        for each key in that list: an 8-byte little-endian element count, then the bytes

Dtypes
    Every stored dtype loads as itself, in a lazyvic Tensor and in an ``as_numpy=True``
    array alike, with no widening: FloatStorage float32, DoubleStorage float64, HalfStorage
    float16, BFloat16Storage bfloat16 (``ml_dtypes.bfloat16`` arrays, a view of the stored
    bits), LongStorage int64, IntStorage int32, ShortStorage int16, CharStorage int8,
    ByteStorage uint8, BoolStorage bool, and uint16 / uint32 / uint64 (``_rebuild_tensor_v3``
    over an UntypedStorage). :func:`save` writes each back the way torch writes it.

    Complex, quantized and other storages raise :class:`CheckpointError`.

Security
    ``data.pkl`` is decoded by :class:`RestrictedUnpickler`, which admits only the
    globals in :data:`ADMITTED_GLOBALS` (the rebuild functions, storage types, dtypes,
    ``collections.OrderedDict``, a few builtins for plain containers, and NumPy's arrays, dtypes
    and scalars, which come back as NumPy objects, as ``torch.load`` returns them); any other
    global (``os.system``, ``builtins.eval``, ...) and any persistent id that is not a
    storage tuple raises :class:`CheckpointError` before anything is called.

    Every size, stride and offset is checked against its storage, and what a file can make
    :func:`load` allocate is bounded (``lazyvic.interop.format_v1.load_limit``): one copy of its
    storages in the lazyvic dtypes, plus at most the load limit (256 MiB, or the file's size
    when larger; ``max_bytes=`` or ``LAZYVIC_MAX_LOAD_BYTES`` change it) for everything the file
    does not back with bytes: a compressed ``data.pkl`` (counted at its unpacked size before it
    is unpacked), tensors larger than their storage (stride 0, overlapping views). Tensors that
    are the same view of one storage come back as one object, so a storage referenced a
    thousand times is copied once.
"""

from __future__ import annotations

import collections
import io
import math
import mmap
import os
import pickle
import reprlib
import struct
import zipfile
from collections.abc import Mapping

import ml_dtypes
import numpy as np
import safetensors.numpy

from lazyvic.creation import tensor as _tensor
from lazyvic.errors import CheckpointError, DTypeError
from lazyvic.interop.format_v1 import LoadBudget, _describe, _read, _write_atomic, load_limit, safetensors_arrays
from lazyvic.nn.module import Parameter
from lazyvic.runtime.device import canonical
from lazyvic.tensor import Tensor

LEGACY_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL_VERSION = 1001
ZIP_MAGIC = b"PK\x03\x04"
_LEGACY_HEAD = pickle.dumps(LEGACY_MAGIC_NUMBER, protocol=2)  # how a legacy file starts (16 bytes)
WRITE_VERSION = "3"  # the <archive>/version torch 1.6 .. 2.x writes
ALIGNMENT = 64  # data records start on a 64-byte boundary, as torch >= 2.4 writes them

# --------------------------------------------------------------------- dtype tables

# torch dtype name -> NumPy dtype of the stored bytes; "bfloat16" is stored as uint16 bits.
_STORAGE_NP = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "bfloat16": np.uint16,
    "int64": np.int64,
    "int32": np.int32,
    "int16": np.int16,
    "int8": np.int8,
    "uint8": np.uint8,
    "bool": np.bool_,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
}

# Typed storage classes (module ``torch``) and the dtype they hold.
_TYPED_STORAGES = {
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}
# Storage classes torch has but lazyvic cannot represent: admitted so the error can say why.
_UNSUPPORTED_STORAGES = {
    "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
    "ComplexHalfStorage": "complex32",
    "QInt8Storage": "qint8",
    "QUInt8Storage": "quint8",
    "QInt32Storage": "qint32",
    "QUInt4x2Storage": "quint4x2",
    "QUInt2x4Storage": "quint2x4",
}
_UNSUPPORTED_DTYPES = (
    "complex32", "complex64", "complex128", "qint8", "quint8", "qint32", "quint4x2", "quint2x4",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float4_e2m1fn_x2", "int1", "int2", "int3", "int4", "int5", "int6", "int7",
    "uint1", "uint2", "uint3", "uint4", "uint5", "uint6", "uint7", "bits8", "bits16",
)  # fmt: skip

# What a lazyvic Tensor (and an ``as_numpy`` array) holds for each stored dtype: the same dtype.
_LAZYVIC_NP = {name: (ml_dtypes.bfloat16 if name == "bfloat16" else np_dtype) for name, np_dtype in _STORAGE_NP.items()}

# Writing: NumPy dtype name -> typed storage class.
_STORAGE_OF_NP = {
    "float32": "FloatStorage",
    "float64": "DoubleStorage",
    "float16": "HalfStorage",
    "bfloat16": "BFloat16Storage",  # an ml_dtypes.bfloat16 array, if the user has one
    "int64": "LongStorage",
    "int32": "IntStorage",
    "int16": "ShortStorage",
    "int8": "CharStorage",
    "uint8": "ByteStorage",
    "bool": "BoolStorage",
}
# Written as ``_rebuild_tensor_v3`` over an UntypedStorage (no typed storage class), as torch does.
_UNTYPED_OF_NP = ("uint16", "uint32", "uint64")


class _StorageType:
    """What ``find_class`` returns for ``torch.<Name>Storage`` / ``torch.storage.UntypedStorage``."""

    __slots__ = ("qualname", "dtype_name", "supported")

    def __init__(self, qualname: str, dtype_name: str | None, supported: bool):
        self.qualname, self.dtype_name, self.supported = qualname, dtype_name, supported

    def __repr__(self) -> str:
        return self.qualname


class _TorchDType:
    """What ``find_class`` returns for a ``torch.<dtype>`` global."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


def _decode_latin1(text, encoding="latin1"):
    """``_codecs.encode`` as protocol-2 pickles use it for ``bytes``; nothing else."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(
            f"_codecs.encode is admitted only as (str, 'latin1'), got ({text!r}, {encoding!r})"
        )
    return text.encode("latin1")


def _torch_size(sizes=()):
    return tuple(int(s) for s in sizes)


class _AdmittedFunction:
    """Wraps an admitted function, so that a pickle cannot set attributes (``__defaults__``) on it."""

    __slots__ = ("_function",)

    def __init__(self, function):
        self._function = function

    def __call__(self, *args):
        return self._function(*args)


_REBUILD_V2 = "torch._utils._rebuild_tensor_v2"
_REBUILD_V3 = "torch._utils._rebuild_tensor_v3"
_REBUILD_PARAMETER = "torch._utils._rebuild_parameter"

# module.name -> what it unpickles to. Everything not listed here is refused.
ADMITTED_GLOBALS: dict[str, object] = {
    _REBUILD_V2: _REBUILD_V2,  # placeholders: the unpickler binds them to the file being read
    _REBUILD_V3: _REBUILD_V3,
    _REBUILD_PARAMETER: _REBUILD_PARAMETER,
    "torch.storage.UntypedStorage": _StorageType("torch.storage.UntypedStorage", None, True),
    "torch.Size": _torch_size,
    "collections.OrderedDict": collections.OrderedDict,
    "builtins.set": set,
    "builtins.frozenset": frozenset,
    "builtins.slice": slice,
    "builtins.complex": complex,
    "_codecs.encode": _decode_latin1,
}
ADMITTED_GLOBALS.update(
    (f"torch.{name}", _StorageType(f"torch.{name}", dtype, True)) for name, dtype in _TYPED_STORAGES.items()
)
ADMITTED_GLOBALS.update(
    (f"torch.{name}", _StorageType(f"torch.{name}", dtype, False)) for name, dtype in _UNSUPPORTED_STORAGES.items()
)
ADMITTED_GLOBALS.update((f"torch.{name}", _TorchDType(name)) for name in (*_STORAGE_NP, *_UNSUPPORTED_DTYPES))


def _numpy_reconstruct(subtype, shape, dtype):
    """NumPy's ``_reconstruct`` as its pickles call it: an empty ndarray that the pickle's BUILD
    fills (``ndarray.__setstate__`` copies the array's bytes, already read from the pickle)."""
    if subtype is not np.ndarray or tuple(shape) != (0,):
        raise pickle.UnpicklingError(
            f"numpy _reconstruct({_short(subtype)}, {_short(shape)}): expected (ndarray, (0,))"
        )
    return np.ndarray.__new__(np.ndarray, (0,), dtype)


_NUMPY_SCALAR = np.float64(0).__reduce__()[0]  # numpy's scalar(dtype, bytes), where numpy 1 and 2 keep it

# NumPy arrays, dtypes and scalars in a pickle (``torch.save(array)``, a NumPy number in a
# training checkpoint): they build plain data, and the objects of an object array are unpickled
# by the same rules. numpy 2 writes ``numpy._core``, numpy 1 ``numpy.core``.
for _module in ("numpy.core.multiarray", "numpy._core.multiarray"):
    ADMITTED_GLOBALS[f"{_module}._reconstruct"] = _numpy_reconstruct
    ADMITTED_GLOBALS[f"{_module}.scalar"] = _NUMPY_SCALAR
ADMITTED_GLOBALS["numpy.ndarray"] = np.ndarray
ADMITTED_GLOBALS["numpy.dtype"] = np.dtype

# --------------------------------------------------------------------- reading


class _Storage:
    """One storage of the file: its dtype, its element count and (once known) its data.

    ``root`` / ``root_nbytes``: the key and byte size of the storage whose bytes these are (a
    legacy view's root; the storage itself otherwise), so that the load limit counts the bytes
    of the file once however many views refer to them.
    """

    __slots__ = ("key", "dtype_name", "numel", "data", "location", "root", "root_nbytes")

    def __init__(self, key: str, dtype_name: str | None, numel: int, data: np.ndarray | None, root=None):
        self.key, self.dtype_name, self.numel, self.data = key, dtype_name, numel, data
        self.location = "cpu"  # where torch saved it ("cpu", "cuda:0", ...): map_location reads it
        self.root = key if root is None else root.root
        self.root_nbytes = (0 if data is None else data.nbytes) if root is None else root.root_nbytes


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles ``data.pkl`` admitting only :data:`ADMITTED_GLOBALS` and storage persistent ids.

    ``storages(key, storage_type, numel, pid)`` returns the :class:`_Storage` of a
    persistent id (the caller reads its bytes); ``build(storage, offset, size, stride,
    requires_grad, dtype_name)`` turns it into the returned tensor or array. Both are
    the reader's; this class only checks the shapes of what the pickle hands them.
    """

    def __init__(self, file, path: str, storages, build, legacy: bool):
        super().__init__(file)
        self._path, self._storages, self._build, self._legacy = path, storages, build, legacy

    def find_class(self, module: str, name: str):
        qualname = f"{'builtins' if module == '__builtin__' else module}.{name}"
        if qualname not in ADMITTED_GLOBALS:
            if module == "torch" and name.endswith("Storage"):
                raise CheckpointError(f"{self._path}: unknown storage type torch.{name}")
            raise CheckpointError(
                f"{self._path}: refused to load global {module}.{name}: the checkpoint pickle may only "
                f"name PyTorch's tensor-rebuild functions, storage types, dtypes, collections.OrderedDict "
                f"and plain containers (see lazyvic.interop.torch.ADMITTED_GLOBALS); the file may be "
                f"malicious, or holds objects that are not tensors and containers"
            )
        found = ADMITTED_GLOBALS[qualname]
        if found == _REBUILD_V2:
            return self._rebuild_tensor_v2
        if found == _REBUILD_V3:
            return self._rebuild_tensor_v3
        if found == _REBUILD_PARAMETER:
            return self._rebuild_parameter
        # A fresh object per lookup: the pickle's BUILD opcode can set attributes on what it
        # names, and must not be able to change how later files are read.
        if isinstance(found, _StorageType):
            return _StorageType(found.qualname, found.dtype_name, found.supported)
        if isinstance(found, _TorchDType):
            return _TorchDType(found.name)
        if found is _decode_latin1 or found is _torch_size or found is _numpy_reconstruct or found is _NUMPY_SCALAR:
            return _AdmittedFunction(found)
        return found  # types (OrderedDict, set, ...) whose attributes cannot be set

    def persistent_load(self, pid):
        fields = 6 if self._legacy else 5
        if not (isinstance(pid, tuple) and len(pid) == fields and pid[0] == "storage"):
            raise CheckpointError(
                f"{self._path}: refused persistent id {_short(pid)}: only storage tuples "
                f"('storage', storage_type, key, location, numel{', view_metadata' if self._legacy else ''}) "
                f"are admitted"
            )
        storage_type, key, location, numel = pid[1:5]
        if not isinstance(storage_type, _StorageType):
            raise CheckpointError(f"{self._path}: unknown storage type {_short(storage_type)} in persistent id")
        if not storage_type.supported:
            raise CheckpointError(
                f"{self._path}: storage {storage_type.qualname} holds {storage_type.dtype_name}, a dtype lazyvic "
                f"cannot represent (supported: {', '.join(_STORAGE_NP)})"
            )
        if not (isinstance(key, str) and isinstance(location, str) and type(numel) is int and numel >= 0):
            raise CheckpointError(f"{self._path}: malformed storage persistent id {_short(pid)}")
        storage = self._storages(key, storage_type, numel, pid)
        if isinstance(storage, _Storage):
            storage.location = location
        return storage

    # The rebuild functions, with torch's signatures (torch/_utils.py).
    def _rebuild_tensor_v2(self, storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
        return self._rebuild(storage, storage_offset, size, stride, requires_grad, None)

    def _rebuild_tensor_v3(
        self, storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None
    ):
        if not isinstance(dtype, _TorchDType):
            raise CheckpointError(f"{self._path}: _rebuild_tensor_v3 got dtype {_short(dtype)}, not a torch dtype")
        if dtype.name not in _STORAGE_NP:
            raise CheckpointError(
                f"{self._path}: a tensor of dtype torch.{dtype.name}, which lazyvic cannot represent "
                f"(supported: {', '.join(_STORAGE_NP)})"
            )
        return self._rebuild(storage, storage_offset, size, stride, requires_grad, dtype.name)

    def _rebuild(self, storage, storage_offset, size, stride, requires_grad, dtype_name):
        if not isinstance(storage, _Storage):
            raise CheckpointError(f"{self._path}: a tensor rebuilt from {_short(storage)}, not a storage")
        if not (_is_int_tuple(size) and _is_int_tuple(stride) and len(size) == len(stride)):
            raise CheckpointError(
                f"{self._path}: a tensor with malformed size {_short(size)} / stride {_short(stride)}"
            )
        if type(storage_offset) is not int or storage_offset < 0 or min((*size, *stride, 0)) < 0:
            raise CheckpointError(
                f"{self._path}: a tensor with negative storage offset, size or stride "
                f"(offset {storage_offset!r}, size {size}, stride {stride})"
            )
        return self._build(storage, storage_offset, tuple(size), tuple(stride), bool(requires_grad), dtype_name)

    def _rebuild_parameter(self, data, requires_grad, backward_hooks, *_):
        if data is None or isinstance(data, np.ndarray):  # None: the legacy scan pass; ndarray: as_numpy
            return data
        if not isinstance(data, Tensor):
            raise CheckpointError(f"{self._path}: _rebuild_parameter got {_short(data)}, not a tensor")
        return Parameter(data, requires_grad=bool(requires_grad) and data.dtype.is_floating_point)


def _placement(path: str, map_location):
    """``map_location`` as a function of a storage's saved location -> "cpu" | "cuda"."""
    if map_location is None:
        return lambda location: "cpu"
    if isinstance(map_location, dict):
        table = {str(k): canonical(v, "load") for k, v in map_location.items()}
        return lambda location: table[location] if location in table else canonical(location, "load")
    if callable(map_location):
        raise CheckpointError(
            f"{path}: map_location as a function is not supported; give a device "
            f'("cpu", "cuda") or a {{saved location: device}} dict'
        )
    device = canonical(map_location, "load")
    return lambda location: device


def _is_int_tuple(value) -> bool:
    return isinstance(value, tuple) and all(type(v) is int for v in value)


_REPR = reprlib.Repr()  # keyword arguments only from Python 3.12
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 60, 60


def _short(value) -> str:
    """A bounded repr for messages (reprlib: a deeply nested value cannot recurse)."""
    text = _REPR.repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def load(
    path: str | os.PathLike, map_location=None, as_numpy: bool = False, *, max_bytes: float | None = None
) -> object:
    """Read a checkpoint written by ``torch.save`` (zip or legacy format), without PyTorch.

    ``path``: a file path, a binary file object open for reading (read to its end) or the
    file's bytes. A path is memory-mapped; the other two are read whole first.

    Returns the saved object — dicts, ``OrderedDict``, lists, tuples, sets and scalars as
    pickled — with each tensor replaced by a lazyvic :class:`~lazyvic.Tensor` (a copy, in
    the lazyvic dtype of the table in the module docstring: float16/bfloat16 become
    float32, int8/int16/uint8 become int32) or, with ``as_numpy=True``, by a NumPy array
    of the stored dtype (bfloat16 excepted: float32, exact). ``nn.Parameter`` becomes
    :class:`lazyvic.nn.Parameter`. Size, stride and storage offset are honoured; with
    ``as_numpy=True`` tensors that share a storage are views of one writable array (one
    copy of the storage), so ``np.shares_memory`` holds between them, as in torch. The
    same tensor object saved twice comes back as one object, and so do tensors that are the
    same view (storage, offset, size, stride, dtype) of one storage, such as tied weights: a
    lazyvic Tensor owns its memory, so tensors that are different views of one storage are
    copies of their views.

    The file is memory-mapped: zip records (stored, uncompressed) and legacy storages
    are sliced at their offsets, so the data is copied once, into the result. Record
    CRCs are checked for ``data.pkl`` only.

    ``map_location`` places the tensors, as ``torch.load``'s does: None (lazyvic's default:
    every tensor on the CPU, where torch would restore the saved device), a device
    (``"cpu"``, ``"cuda"``, ``"cuda:0"`` or a device object) for every tensor, or a
    ``{saved location: device}`` dict such as ``{"cuda:0": "cpu"}`` (saved locations it does
    not name keep their device). A callable is not supported. Ignored with ``as_numpy``.

    ``max_bytes``: how many bytes the load may allocate beyond one copy of the file's storages
    (in the lazyvic dtypes); the default, ``lazyvic.interop.format_v1.load_limit``, is the
    environment variable ``LAZYVIC_MAX_LOAD_BYTES`` when set, else 256 MiB or the file's size
    when larger; ``math.inf`` turns it off for files you trust. Counted against it, before
    anything is allocated: a compressed ``data.pkl``'s unpacked size, and every tensor larger
    than what its storage holds (a stride-0 or overlapping view materialized as a Tensor; with
    ``as_numpy=True`` views stay views, bfloat16 excepted).

    Raises:
        CheckpointError: naming the file and the problem: no such file or unreadable; not
            a PyTorch checkpoint (neither a zip nor the legacy magic number); a truncated
            or corrupt zip or pickle; compressed records; a missing ``data.pkl`` or
            ``data/<key>`` record; a global outside :data:`ADMITTED_GLOBALS` (e.g.
            ``os.system``) or a persistent id that is not a storage tuple; an unknown
            storage type; a dtype lazyvic cannot represent (complex, quantized, float8);
            a storage too short for a tensor's size, stride and offset; a callable
            ``map_location``; a load that would allocate more than ``max_bytes`` beyond the
            file's data; running out of memory (``MemoryError``) or a structure nested too
            deeply for Python (``RecursionError``).
        DeviceError: ``map_location`` names an unknown device, or "cuda" without a GPU.
    """
    if isinstance(path, (bytes, bytearray, memoryview)):
        return _load_bytes(f"<{type(path).__name__} object>", bytes(path), map_location, as_numpy, max_bytes)
    if hasattr(path, "read"):
        label = _describe(path)
        return _load_bytes(label, _read(path, label), map_location, as_numpy, max_bytes)
    path = os.fspath(path)
    place = _placement(path, map_location)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read the file: {e}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise CheckpointError(f"{path} is not a PyTorch checkpoint: the file is empty")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            return _read_checkpoint(path, mm, f, place, as_numpy, LoadBudget(load_limit(size, max_bytes), path))
        finally:
            try:
                mm.close()
            except BufferError:  # a view still refers to it; the garbage collector closes it
                pass


def _load_bytes(label: str, blob: bytes, map_location, as_numpy: bool, max_bytes: float | None):
    """:func:`load` of a checkpoint's bytes (a file object's, read to its end); ``label`` names it
    in errors."""
    if not blob:
        raise CheckpointError(f"{label} is not a PyTorch checkpoint: the file is empty")
    budget = LoadBudget(load_limit(len(blob), max_bytes), label)
    return _read_checkpoint(label, blob, io.BytesIO(blob), _placement(label, map_location), as_numpy, budget)


def _read_checkpoint(path: str, data, f, place, as_numpy: bool, budget: LoadBudget):
    """The object of the checkpoint whose bytes are ``data`` (a mmap or bytes) and ``f`` (a
    seekable binary file over them, at offset 0)."""
    try:
        reader = _Reader(path, data, as_numpy, place, budget)
        if bytes(data[: len(ZIP_MAGIC)]) == ZIP_MAGIC:
            return reader.load_zip()
        return reader.load_legacy(f)
    except MemoryError:
        raise CheckpointError(f"{path}: ran out of memory while loading it (MemoryError)") from None
    except RecursionError:
        raise CheckpointError(
            f"{path}: corrupt checkpoint: its objects are nested too deeply for Python (RecursionError)"
        ) from None


def is_checkpoint(head: bytes) -> bool:
    """Whether ``head``, a file's first bytes (at least 15), starts a ``torch.save`` file: a zip
    archive, or the legacy format's pickled magic number."""
    return head[: len(ZIP_MAGIC)] == ZIP_MAGIC or head[: len(_LEGACY_HEAD)] == _LEGACY_HEAD


class _Reader:
    """Turns storages and rebuild calls into arrays or Tensors for one file."""

    def __init__(self, path: str, mm: mmap.mmap, as_numpy: bool, place=None, budget: LoadBudget | None = None):
        self.path, self.mm, self.as_numpy = path, mm, as_numpy
        self.place = place or (lambda location: "cpu")  # saved location -> lazyvic device
        self.byteorder = "<"
        self.budget = budget or LoadBudget(load_limit(len(mm)), path)
        self._credited: set = set()  # (storage root, dtype) whose bytes the budget was credited
        self._views: dict = {}  # one Tensor per distinct view (address, shape, strides, dtype, ...)

    # ----------------------------------------------------------------- zip format
    def load_zip(self):
        path = self.path
        try:
            archive = zipfile.ZipFile(_MMapFile(self.mm))
            infos = {info.filename: info for info in archive.infolist()}
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            raise CheckpointError(f"{path} is a corrupt or truncated zip archive: {e}") from None
        pkl_names = [name for name in infos if name.endswith("/data.pkl") and name.count("/") == 1]
        if "data.pkl" in infos:
            pkl_names.append("data.pkl")
        if len(pkl_names) != 1:
            raise CheckpointError(
                f"{path} is a zip archive but not a PyTorch checkpoint: "
                f"{'no' if not pkl_names else 'more than one'} <archive>/data.pkl record"
            )
        prefix = pkl_names[0][: -len("data.pkl")]
        try:
            byteorder_info = infos.get(prefix + "byteorder")
            byteorder = self._read_small(archive, byteorder_info).decode().strip() if byteorder_info else "little"
            pickled = self._read_small(archive, infos[pkl_names[0]])
        except UnicodeDecodeError:
            raise CheckpointError(f"{path}: the record {prefix}byteorder is not text") from None
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
            raise CheckpointError(f"{path} is a corrupt or truncated zip archive: {e}") from None
        self._set_byteorder(byteorder)

        def storages(key, storage_type, numel, pid):
            if key not in cache:
                name = f"{prefix}data/{key}"
                if name not in infos:
                    raise CheckpointError(f"{path}: the record {name} of storage {key!r} is missing")
                data = self._record(infos[name])
                cache[key] = self._storage(key, storage_type, numel, data, f"record {name}")
            return cache[key]

        cache: dict[str, _Storage] = {}
        try:
            return self._unpickle(io.BytesIO(pickled), storages, legacy=False)
        finally:
            cache.clear()

    def _read_small(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
        """A record read whole (``data.pkl``, ``byteorder``); a compressed one's unpacked size is
        counted against the load limit before it is unpacked (zipfile stops at that size)."""
        if info.compress_type != zipfile.ZIP_STORED:
            self.budget.charge(info.file_size, f"record {info.filename} (compressed, {info.file_size} bytes unpacked)")
        return archive.read(info)

    def _record(self, info: zipfile.ZipInfo) -> memoryview:
        """The bytes of a stored record, sliced from the mapped file (no copy)."""
        if info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(
                f"{self.path}: record {info.filename} is compressed; PyTorch stores records uncompressed"
            )
        start = info.header_offset
        header = self.mm[start : start + 30]
        if len(header) < 30 or header[:4] != ZIP_MAGIC:
            raise CheckpointError(f"{self.path} is a corrupt zip archive: bad local header of {info.filename}")
        name_len, extra_len = struct.unpack("<HH", header[26:30])
        begin = start + 30 + name_len + extra_len
        if begin + info.file_size > len(self.mm):
            raise CheckpointError(f"{self.path} is truncated: record {info.filename} runs past the end of the file")
        return memoryview(self.mm)[begin : begin + info.file_size]

    # -------------------------------------------------------------- legacy format
    def load_legacy(self, f):
        path = self.path
        header_loader = RestrictedUnpickler(f, path, _no_storages(path), None, legacy=True)
        try:
            magic = header_loader.load()
        except CheckpointError:
            raise
        except Exception:
            magic = None
        if magic != LEGACY_MAGIC_NUMBER or type(magic) is not int:
            raise CheckpointError(
                f"{path} is not a PyTorch checkpoint: neither a zip archive nor the legacy format "
                f"(wrong magic number, expected {LEGACY_MAGIC_NUMBER:#x})"
            )
        try:
            protocol = header_loader.load()
            sys_info = header_loader.load()
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(f"{path}: corrupt or truncated legacy checkpoint header: {e}") from None
        if protocol != LEGACY_PROTOCOL_VERSION:
            raise CheckpointError(f"{path}: legacy protocol version {protocol!r}, expected {LEGACY_PROTOCOL_VERSION}")
        if isinstance(sys_info, dict):
            self._set_byteorder("little" if sys_info.get("little_endian", True) else "big")
        objects_at = f.tell()

        # Pass 1: learn each storage's type (hence its byte size) without building tensors.
        seen: dict[str, _Storage] = {}

        def scan(key, storage_type, numel, pid):
            return seen.setdefault(key, _Storage(key, storage_type.dtype_name, numel, None))

        self._unpickle(f, scan, legacy=True, build=lambda *args: None)
        try:
            keys = RestrictedUnpickler(f, path, _no_storages(path), None, legacy=True).load()
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(
                f"{path}: corrupt or truncated legacy checkpoint: the storage key list: {e}"
            ) from None
        if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
            raise CheckpointError(f"{path}: corrupt legacy checkpoint: the storage key list is {_short(keys)}")

        offset, data = f.tell(), {}
        for key in keys:
            if key not in seen:
                raise CheckpointError(
                    f"{path}: storage {key!r} is listed but no tensor uses it, so its size is unknown"
                )
            itemsize = 1 if seen[key].dtype_name is None else np.dtype(_STORAGE_NP[seen[key].dtype_name]).itemsize
            count_bytes = self.mm[offset : offset + 8]
            if len(count_bytes) < 8:
                raise CheckpointError(f"{path} is truncated: the data of storage {key!r} is missing")
            count = int.from_bytes(count_bytes, "little")
            end = offset + 8 + count * itemsize
            if end > len(self.mm):
                raise CheckpointError(
                    f"{path} is truncated: storage {key!r} needs {count * itemsize} bytes, "
                    f"{len(self.mm) - offset - 8} are left"
                )
            data[key] = (memoryview(self.mm)[offset + 8 : end], count)
            offset = end
        missing = sorted(set(seen) - set(data))
        if missing:
            raise CheckpointError(f"{path}: the data of storage {missing[0]!r} is missing (not in the key list)")

        roots: dict[str, _Storage] = {}

        def storages(key, storage_type, numel, pid):
            if key not in roots:
                raw, count = data[key]
                roots[key] = self._storage(key, storage_type, count, raw, f"storage {key!r}")
            view = pid[5]
            if view is None:
                return roots[key]
            if not (isinstance(view, tuple) and len(view) == 3 and _is_int_tuple(view[1:])):
                raise CheckpointError(f"{path}: malformed storage view {_short(view)}")
            view_key, view_offset, view_size = view
            root = roots[key]
            if view_offset < 0 or view_size < 0 or view_offset + view_size > root.numel:
                raise CheckpointError(f"{path}: storage view {view_key!r} lies outside storage {key!r}")
            view_data = root.data[view_offset : view_offset + view_size]
            return _Storage(f"{view_key}", root.dtype_name, view_size, view_data, root=root)

        f.seek(objects_at)
        try:
            return self._unpickle(f, storages, legacy=True)
        finally:
            roots.clear()
            data.clear()

    # -------------------------------------------------------------------- shared
    def _set_byteorder(self, byteorder: str) -> None:
        if byteorder not in ("little", "big"):
            raise CheckpointError(f"{self.path}: byteorder {byteorder!r}, expected 'little' or 'big'")
        self.byteorder = "<" if byteorder == "little" else ">"

    def _storage(self, key, storage_type: _StorageType, numel: int, raw: memoryview, where: str) -> _Storage:
        dtype_name = storage_type.dtype_name
        itemsize = 1 if dtype_name is None else np.dtype(_STORAGE_NP[dtype_name]).itemsize
        if len(raw) < numel * itemsize:
            raise CheckpointError(
                f"{self.path}: {where} holds {len(raw)} bytes, too short for storage {key!r} of "
                f"{numel} x {itemsize}-byte elements"
            )
        np_dtype = np.dtype(np.uint8 if dtype_name is None else _STORAGE_NP[dtype_name]).newbyteorder(self.byteorder)
        data = np.frombuffer(raw, dtype=np_dtype, count=numel)
        if self.as_numpy:
            data = data.astype(data.dtype.newbyteorder("="))  # one writable copy, shared by its views
        return _Storage(key, dtype_name, numel, data)

    def _unpickle(self, file, storages, legacy: bool, build=None):
        unpickler = RestrictedUnpickler(file, self.path, storages, build or self._build, legacy)
        try:
            return unpickler.load()
        except (CheckpointError, MemoryError, RecursionError):
            raise  # load() names the file for the last two
        except Exception as e:  # UnpicklingError, EOFError, a bad opcode argument, ...
            raise CheckpointError(
                f"{self.path}: corrupt or truncated checkpoint pickle ({type(e).__name__}: {e})"
            ) from None
        finally:
            # The memo holds the unpickler's own bound methods (a cycle) and the storages, which
            # are views of the mapped file: drop them now so load() can unmap it.
            unpickler.memo.clear()

    def _build(self, storage: _Storage, offset: int, size: tuple, stride: tuple, requires_grad: bool, dtype_name):
        if dtype_name is None:  # _rebuild_tensor_v2 over a typed storage
            if storage.dtype_name is None:
                raise CheckpointError(f"{self.path}: _rebuild_tensor_v2 over an UntypedStorage has no dtype")
            dtype_name = storage.dtype_name
        data = storage.data
        if storage.dtype_name != dtype_name:  # v3 over UntypedStorage: bytes -> elements
            if storage.dtype_name is not None:
                raise CheckpointError(
                    f"{self.path}: a torch.{dtype_name} tensor over a {storage.dtype_name} storage {storage.key!r}"
                )
            np_dtype = np.dtype(_STORAGE_NP[dtype_name]).newbyteorder(self.byteorder)
            usable = len(data) - len(data) % np_dtype.itemsize
            data = data[:usable].view(np_dtype)
        numel = math.prod(size)  # Python ints: a hostile size cannot overflow
        if numel == 0:
            needed = offset
        else:
            needed = offset + 1 + sum((n - 1) * s for n, s in zip(size, stride))
        if needed > len(data):
            raise CheckpointError(
                f"{self.path}: storage {storage.key!r} holds {len(data)} elements, too few for a tensor of "
                f"size {size}, stride {stride} and storage offset {offset} (needs {needed})"
            )
        if numel == 0:
            view = np.empty(size, dtype=data.dtype)
        else:
            item = data.itemsize
            view = np.lib.stride_tricks.as_strided(
                data[offset:], shape=size, strides=tuple(s * item for s in stride), writeable=self.as_numpy
            )
        if dtype_name == "bfloat16":  # its bits, read as uint16: the same bytes as ml_dtypes.bfloat16
            if view.dtype.byteorder not in "=|":
                view = view.astype(np.uint16)
            view = view.view(ml_dtypes.bfloat16)
        if self.as_numpy:
            return view  # a view of the storage's one copy: nothing allocated
        device = None if self.as_numpy else self.place(storage.location)
        requires_grad = requires_grad and not self.as_numpy and np.dtype(_LAZYVIC_NP[dtype_name]).kind == "f"
        key = None
        if numel and not self.as_numpy:
            address = view.__array_interface__["data"][0]
            key = (address, view.shape, view.strides, view.dtype.str, dtype_name, requires_grad, device)
            if key in self._views:
                return self._views[key]
        self._charge(storage, dtype_name, numel, size, stride)
        out = _tensor(view, dtype=_LAZYVIC_NP[dtype_name], requires_grad=requires_grad, device=device)  # one copy
        if key is not None:
            self._views[key] = out
        return out

    def _charge(self, storage: _Storage, dtype_name: str, numel: int, size: tuple, stride: tuple) -> None:
        """Count a materialized tensor against the load limit; the bytes of its storage's root (in
        the output dtype) are credited once, so only what the file does not back is counted."""
        out_itemsize = np.dtype(_LAZYVIC_NP[dtype_name]).itemsize
        root = (storage.root, dtype_name)
        if root not in self._credited:
            self._credited.add(root)
            stored_itemsize = np.dtype(_STORAGE_NP[dtype_name]).itemsize
            self.budget.credit(storage.root_nbytes // stored_itemsize * out_itemsize)
        self.budget.charge(
            numel * out_itemsize,
            f"a tensor of size {size} and stride {stride} over storage {storage.key!r} "
            f"({storage.root_nbytes} bytes in the file)",
        )


def _no_storages(path: str):
    def refuse(key, storage_type, numel, pid):
        raise CheckpointError(f"{path}: a storage persistent id in the legacy header pickles")

    return refuse


class _MMapFile(io.RawIOBase):
    """A read-only, seekable file over a mmap, so ``zipfile`` never copies the whole file."""

    def __init__(self, mm: mmap.mmap):
        self._mm, self._pos = mm, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self._mm)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = len(self._mm) if n is None or n < 0 else min(len(self._mm), self._pos + n)
        data = self._mm[self._pos : end]
        self._pos = max(self._pos, end)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


# --------------------------------------------------------------------- writing


class _TorchGlobal:
    """A torch global written by name (``GLOBAL 'module name'``) though torch is not imported."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args):  # pickle insists that a reduce function be callable
        raise TypeError(f"{self.module}.{self.name} is a name to pickle; lazyvic does not call torch")


_W_REBUILD_V2 = _TorchGlobal("torch._utils", "_rebuild_tensor_v2")
_W_REBUILD_PARAMETER = _TorchGlobal("torch._utils", "_rebuild_parameter")
_W_REBUILD_V3 = _TorchGlobal("torch._utils", "_rebuild_tensor_v3")
_W_STORAGES = {name: _TorchGlobal("torch", name) for name in _TYPED_STORAGES}
_W_STORAGES.update((name, _TorchGlobal("torch.storage", "UntypedStorage")) for name in _UNTYPED_OF_NP)


class _StorageRecord:
    """A storage to write: ``data/<key>`` holds ``data`` (C-contiguous) as bytes."""

    __slots__ = ("key", "storage_type", "data")

    def __init__(self, key: str, storage_type: str, data: np.ndarray):
        self.key, self.storage_type, self.data = key, storage_type, data


class _TensorRecord:
    """Pickles as ``_rebuild_tensor_v2(storage, 0, shape, contiguous stride, False, OrderedDict())``."""

    def __init__(self, storage: _StorageRecord, shape: tuple, stride: tuple):
        self.storage, self.shape, self.stride = storage, shape, stride

    def __reduce__(self):
        hooks = collections.OrderedDict()
        if self.storage.storage_type in _UNTYPED_OF_NP:  # dtype given to _rebuild_tensor_v3, as torch writes it
            dtype = _TorchGlobal("torch", self.storage.storage_type)
            return _W_REBUILD_V3, (self.storage, 0, self.shape, self.stride, False, hooks, dtype)
        return _W_REBUILD_V2, (self.storage, 0, self.shape, self.stride, False, hooks)


class _ParameterRecord:
    def __init__(self, tensor: _TensorRecord, requires_grad: bool):
        self.tensor, self.requires_grad = tensor, requires_grad

    def __reduce__(self):
        return _W_REBUILD_PARAMETER, (self.tensor, self.requires_grad, collections.OrderedDict())


class _CheckpointPickler(pickle._Pickler):
    """The pure-Python pickler, which lets ``_TorchGlobal`` write a GLOBAL opcode without torch."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_torch_global(self, obj: _TorchGlobal) -> None:
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("utf-8"))
        self.memoize(obj)

    dispatch[_TorchGlobal] = save_torch_global

    def persistent_id(self, obj):
        if isinstance(obj, _StorageRecord):
            untyped = obj.storage_type in _UNTYPED_OF_NP  # an UntypedStorage counts bytes
            return (
                "storage",
                _W_STORAGES[obj.storage_type],
                obj.key,
                "cpu",
                obj.data.nbytes if untyped else obj.data.size,
            )
        return None


class _StateEncoder:
    """Copies ``obj`` into picklable records, checking every type; tensors become records."""

    def __init__(self):
        self.storages: list[_StorageRecord] = []
        self._records: dict[int, object] = {}
        self._keep: list = []  # keeps encoded objects alive, so their ids stay unique
        self._open: set[int] = set()

    def encode(self, value, keys: tuple):
        if isinstance(value, (Tensor, np.ndarray)):
            return self._tensor(value, keys)
        if isinstance(value, np.generic) and value.dtype.kind in "biuf":
            return value.item()
        if value is None or isinstance(value, (bool, int, float, str, bytes)):
            return value
        if isinstance(value, (Mapping, list, tuple)):
            if id(value) in self._open:
                raise TypeError(f"save: the {type(value).__name__} at {_where(keys)} contains itself")
            self._open.add(id(value))
            try:
                if isinstance(value, Mapping):
                    out = collections.OrderedDict() if isinstance(value, collections.OrderedDict) else {}
                    for k, v in value.items():
                        if not (k is None or isinstance(k, (bool, int, float, str))):
                            raise TypeError(f"save: dict key {k!r} at {_where(keys)} is not a str, int, float or bool")
                        out[k] = self.encode(v, keys + (k,))
                    return out
                items = [self.encode(v, keys + (i,)) for i, v in enumerate(value)]
                return tuple(items) if isinstance(value, tuple) else items
            finally:
                self._open.discard(id(value))
        raise TypeError(
            f"save: cannot store an object of type {type(value).__module__}.{type(value).__qualname__} at "
            f"{_where(keys)}; a PyTorch checkpoint from lazyvic holds Tensors, NumPy arrays, dicts, lists, "
            f"tuples, int, float, str, bytes, bool and None"
        )

    def _tensor(self, value, keys: tuple):
        if id(value) in self._records:  # the same object twice: one storage, one tensor in torch
            return self._records[id(value)]
        array = value.numpy() if isinstance(value, Tensor) else value
        np_dtype = array.dtype.newbyteorder("=") if array.dtype.byteorder == ">" else array.dtype
        storage_type = _STORAGE_OF_NP.get(np_dtype.name) or (np_dtype.name if np_dtype.name in _UNTYPED_OF_NP else None)
        if storage_type is None or np_dtype.itemsize != np.dtype(_LAZYVIC_NP[np_dtype.name]).itemsize:
            raise DTypeError(
                f"save: array at {_where(keys)} has dtype {array.dtype}; PyTorch checkpoints from lazyvic hold "
                f"{', '.join(_LAZYVIC_NP)}"
            )
        data = np.asarray(array, order="C")  # keeps 0-d arrays 0-d (np.ascontiguousarray would not)
        if data.dtype.byteorder == ">":
            data = data.astype(data.dtype.newbyteorder("<"))
        storage = _StorageRecord(str(len(self.storages)), storage_type, data)
        self.storages.append(storage)
        shape = tuple(int(n) for n in data.shape)
        stride, step = [], 1
        for n in reversed(shape):
            stride.append(step)
            step *= max(n, 1)
        record = _TensorRecord(storage, shape, tuple(reversed(stride)))
        if isinstance(value, Parameter):
            record = _ParameterRecord(record, bool(value.requires_grad))
        self._records[id(value)] = record
        self._keep.append(value)
        return record


def _where(keys: tuple) -> str:
    return "obj" + "".join(f"[{k!r}]" for k in keys)


def save(obj, path: str | os.PathLike) -> None:
    """Write ``obj`` as a PyTorch zip-format checkpoint that ``torch.load(path, weights_only=True)`` reads.

    ``obj`` is a lazyvic Tensor, a NumPy array, or a nested container — dicts (an
    ``OrderedDict`` stays one) with str/int/float/bool keys, lists, tuples — of Tensors,
    NumPy arrays (float32, float64, float16, int64, int32, int16, int8, uint8, bool, and
    ``ml_dtypes.bfloat16``) and Python scalars (int, float, str, bytes, bool, None; NumPy
    scalars become the Python scalar they hold). Each distinct Tensor or array gets its
    own storage, written C-contiguous; the same object twice shares one, and torch loads
    it as one tensor. A :class:`lazyvic.nn.Parameter` is written as ``nn.Parameter``.

    Layout (see the module docstring): records ``<archive>/data.pkl`` (pickle protocol 2:
    ``torch._utils._rebuild_tensor_v2`` with typed storage globals such as
    ``torch.FloatStorage`` and persistent ids ``('storage', type, key, 'cpu', numel)``),
    ``<archive>/byteorder`` = "little", ``<archive>/data/<key>`` and
    ``<archive>/version`` = "3", all ZIP_STORED, data records aligned to 64 bytes;
    ``<archive>`` is the file stem (or "archive").

    The write is atomic: the archive is assembled in memory, written to a temporary file
    in the same directory, fsynced and renamed over ``path``; on any error nothing is
    left behind and an existing file at ``path`` is untouched.

    Raises:
        TypeError: an object of an unsupported type or a bad dict key (names its place
            in ``obj``), or a container that contains itself.
        DTypeError: (a TypeError) an array of a dtype a typed torch storage cannot hold.
        CheckpointError: ``obj`` is nested too deeply for Python (a RecursionError).
        OSError: the file cannot be written.
    """
    path = os.fspath(path)
    encoder = _StateEncoder()
    pickled = io.BytesIO()
    try:
        encoded = encoder.encode(obj, ())
        _CheckpointPickler(pickled, protocol=2).dump(encoded)
    except RecursionError:
        raise CheckpointError(
            f"{path}: the object is nested too deeply to save (RecursionError); nothing was written"
        ) from None

    stem = os.path.splitext(os.path.basename(path))[0]
    archive = stem if stem and all(c.isalnum() or c in "_-." for c in stem) else "archive"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as zf:
        _write_record(zf, f"{archive}/data.pkl", pickled.getbuffer())
        _write_record(zf, f"{archive}/byteorder", b"little")
        for storage in encoder.storages:
            _write_record(zf, f"{archive}/data/{storage.key}", storage.data.reshape(-1).view(np.uint8))
        _write_record(zf, f"{archive}/version", f"{WRITE_VERSION}\n".encode())
    _write_atomic(path, [buffer.getbuffer()])


def _write_record(zf: zipfile.ZipFile, name: str, data) -> None:
    """One ZIP_STORED record whose data starts on an ALIGNMENT boundary (padding in an extra field, like torch)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    data_start = zf.fp.tell() + 30 + len(name.encode()) + 4
    pad = -data_start % ALIGNMENT
    info.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad  # "FB": the extra field id torch uses
    zf.writestr(info, data)


# --------------------------------------------------------------------- safetensors


def load_safetensors(path: str | os.PathLike, as_numpy: bool = False) -> dict:
    """Read a safetensors file into ``{name: Tensor}`` (or ``{name: np.ndarray}`` with ``as_numpy=True``).

    Through ``safetensors.numpy.load_file``. Tensors and arrays keep the stored dtype
    (bfloat16 through ``ml_dtypes``).

    What a file can make this allocate: its tensors, whose bytes safetensors checks lie in the
    file without overlapping (once as stored, once more as the tensors).

    Raises:
        CheckpointError: naming the file: missing, unreadable, or not a valid safetensors
            file; a dtype lazyvic cannot represent (as_numpy=False); running out of memory
            (``MemoryError``).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such file")
    try:
        with open(path, "rb") as f:
            arrays = safetensors_arrays(f.read())
    except MemoryError:
        raise CheckpointError(f"{path}: ran out of memory while loading it (MemoryError)") from None
    except Exception as e:  # SafetensorError, a dtype NumPy does not know, ...
        raise CheckpointError(f"{path}: not a valid safetensors file ({type(e).__name__}: {e})") from None
    if as_numpy:
        return arrays
    out = {}
    for name in list(arrays):
        array = arrays.pop(name)  # one stored copy at a time next to the widened ones
        target = _LAZYVIC_NP.get(array.dtype.name)
        if target is None:
            raise CheckpointError(f"{path}: tensor {name!r} has dtype {array.dtype}, which lazyvic cannot represent")
        try:
            out[name] = Tensor(array)
        except MemoryError:
            raise CheckpointError(f"{path}: ran out of memory while loading tensor {name!r} (MemoryError)") from None
    return out


def save_safetensors(state_dict: Mapping, path: str | os.PathLike, metadata: dict | None = None) -> None:
    """Write ``{str: Tensor or np.ndarray}`` as a safetensors file through ``safetensors.numpy``.

    Arrays are written as C-contiguous copies (safetensors 0.8 copies raw memory from the
    data pointer, so a strided view would come out scrambled). ``metadata`` is a
    ``{str: str}`` dict stored in the header. The write is atomic, as for :func:`save`.

    Raises:
        TypeError: a key that is not a str, or a value that is not a Tensor or array.
        OSError: the file cannot be written.
    """
    arrays = {}
    for name, value in state_dict.items():
        if not isinstance(name, str):
            raise TypeError(f"save_safetensors: key {name!r} is not a str")
        if not isinstance(value, (Tensor, np.ndarray)):
            raise TypeError(f"save_safetensors: {name!r} is a {type(value).__name__}, not a Tensor or NumPy array")
        array = value.numpy() if isinstance(value, Tensor) else value
        arrays[name] = np.asarray(array, dtype=array.dtype.newbyteorder("="), order="C")
    blob = safetensors.numpy.save(arrays, metadata=metadata)
    _write_atomic(os.fspath(path), [blob])
