"""Input arrays for a module's entry parameters: seeded random ones, or read from an ``.npz``.

Seeded inputs follow each parameter's uses (:mod:`fusegen.runtime.input_uses`): index operands (start indices of
dynamic-slice / dynamic-update-slice, gather and scatter indices) get integers inside the operand's bounds, so a
run exercises real addresses instead of clamping; a parameter reaching a root, log, power base or denominator gets
values inside the interval those ask (positive ones, or above -1 for ``count + 1``); a dot or convolution operand
gets ``N(0, 1/fan_in)``, so activations stay finite through depth.
"""

from __future__ import annotations

import ast
import re
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from fusegen.hlo import dtypes
from fusegen.hlo.ir import Module, Shape
from fusegen.runtime.input_uses import ParameterUse, parameter_uses


class InputError(ValueError):
    """An input array is missing, misshaped or mistyped (the message names the parameter)."""


def index_bounds(module: Module) -> dict[int, int]:
    """Entry parameter number -> largest in-range value, for parameters that feed index operands."""
    return {n: u.index_high for n, u in parameter_uses(module).items() if u.index_high is not None}


def random_array(shape: Shape, rng: np.random.Generator, high: int | None = None,
                 use: ParameterUse | None = None) -> np.ndarray:
    """A seeded random logical array of ``shape``: normal floats, small integers, random preds.

    ``high`` (or ``use.index_high``) draws integers in ``[0, high]``. ``use.fan_in`` scales floats of 16 bits
    or more to ``N(0, 1/fan_in)`` (f8 / f4 operands carry their own scale factors; scaling them would flush most
    values to zero). ``use.bounds`` ``(low, high)`` maps a float ``x ~ N(0, 1)`` to ``low + 0.5 + |x|`` (only a
    low bound: ``|x| + 0.5`` for a positive value), ``high - 0.5 - |x|`` (only a high one) or into the middle 90%
    of the interval (``tanh``), and the small integers to the 16 next to the bound (``[1, 16]`` for a positive
    value); bounds take precedence over ``fan_in``. Each draw takes the same random stream whatever ``use``
    says, so one parameter's use leaves every other parameter's values unchanged.

    Values are drawn at the element type's width (``float32`` for every float type up to 32 bits, then
    converted), never through a ``float64`` staging array twice the size of the result.
    """
    et = shape.element_type
    dt = dtypes.numpy_dtype(et)
    dims = tuple(shape.dimensions)
    use = use or ParameterUse()
    high = use.index_high if high is None else high
    if high is not None and dtypes.is_integral(et):
        return _integers(rng, 0, high + 1, dims, dt)
    if et == "pred":
        return rng.integers(0, 2, size=dims, dtype=np.uint8).view(np.bool_)
    if dtypes.is_integral(et):
        lo, hi = (0, 16) if dtypes.is_unsigned_int(et) or dtypes.bit_width(et) < 8 else (-8, 8)
        if dtypes.bit_width(et) < 8:
            lo, hi = 0, 2
        x = _integers(rng, lo, hi, dims, dt)
        return x if use.bounds is None else _bounded_integers(x.astype(np.int64) - lo, use.bounds, et, dt)
    scale = 1.0 if not use.fan_in or dtypes.bit_width(et) < 16 or use.bounds else 1.0 / np.sqrt(use.fan_in)
    if dtypes.is_complex(et):
        part = np.float64 if dt == np.complex128 else np.float32
        out = np.empty(dims, dt)
        out.real = rng.standard_normal(dims, dtype=part) * part(scale)
        out.imag = rng.standard_normal(dims, dtype=part) * part(scale)
        return out
    x = rng.standard_normal(dims, dtype=np.float64 if dt == np.float64 else np.float32)
    if use.bounds is not None:
        x = _bounded_floats(x, *use.bounds)
    if scale != 1.0:
        x *= x.dtype.type(scale)
    return x.astype(dt, copy=False)


def _bounded_floats(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``x ~ N(0, 1)`` moved inside the open interval ``(lo, hi)`` (one bound may be infinite)."""
    if np.isfinite(lo) and np.isfinite(hi):
        return ((lo + hi) / 2 + (hi - lo) / 2 * 0.9 * np.tanh(x)).astype(x.dtype)
    a = np.abs(x, out=x)
    a += x.dtype.type(0.5)
    return (lo + a if np.isfinite(lo) else hi - a).astype(x.dtype)


def _bounded_integers(k: np.ndarray, bounds: tuple[float, float], et: str, dt: np.dtype) -> np.ndarray:
    """Draws ``k`` in ``[0, 16)`` as the integers next to ``bounds`` (open), within the type's range."""
    lo, hi = bounds
    first = int(np.floor(lo)) + 1 if np.isfinite(lo) else None
    last = int(np.ceil(hi)) - 1 if np.isfinite(hi) else None
    if first is not None and last is not None:
        v = first + k % max(1, last - first + 1)
    else:
        v = first + k if first is not None else last - k
    bits = dtypes.bit_width(et)
    tmin, tmax = (0, 2 ** bits - 1) if dtypes.is_unsigned_int(et) else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return np.clip(v, tmin, tmax).astype(dt)


def _integers(rng: np.random.Generator, lo: int, hi: int, dims: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """Integers in ``[lo, hi)`` drawn directly at ``dt`` (or its numpy storage type for 2/4-bit types)."""
    native = dt if np.dtype(dt).kind in "iu" and np.dtype(dt).type.__module__ == "numpy" else np.int32
    try:
        return rng.integers(lo, hi, size=dims, dtype=native).astype(dt, copy=False)
    except ValueError:  # bound outside the native type (e.g. an s8 index into a 300-long axis)
        return rng.integers(lo, hi, size=dims, dtype=np.int64).astype(dt)


def random_value(shape: Shape, rng: np.random.Generator, high: int | None = None,
                 use: ParameterUse | None = None) -> Any:
    """:func:`random_array` for an array shape; a tuple of them for a tuple shape (``use`` is for arrays)."""
    if shape.is_tuple:
        return tuple(random_value(s, rng) for s in shape.tuple_shapes)
    if shape.element_type == "token":
        return np.zeros((), np.int8)
    return random_array(shape, rng, high, use)


def make_inputs(module: Module, seed: int = 0) -> list[Any]:
    """Seeded random values for every entry parameter, drawn as its uses ask (:func:`parameter_uses`: index
    operands in range, positive values where a root, log, power or denominator reads them, dot and convolution
    operands scaled by their fan-in).

    Raises:
        InputError: a parameter's element type has no array form here (e.g. ``s1``).
    """
    rng = np.random.default_rng(seed)
    try:
        uses = parameter_uses(module)
    except (IndexError, KeyError, TypeError, AttributeError, ValueError, ArithmeticError):
        uses = {}  # only a hint for friendlier inputs; the run itself reports malformed operands
    out = []
    for p in module.entry.parameters:
        try:
            out.append(random_value(p.shape, rng, None, uses.get(p.parameter_number)))
        except dtypes.UnsupportedTypeError as e:
            raise InputError(f"{module.filename}: parameter {p.parameter_number} (%{p.name}): cannot make inputs: "
                             f"{e}") from None
    return out


def _npy_header(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from an ``.npy`` member's header, decompressing only the header bytes."""
    from numpy.lib import format as npy

    with z.open(info) as f:
        major, _ = npy.read_magic(f)
        if major not in (1, 2, 3):
            raise ValueError(f"unsupported .npy format version {major}")
        size = int.from_bytes(f.read(2 if major == 1 else 4), "little")
        if size > 10000:
            raise ValueError(f"header of {size} bytes is too long")
        header = ast.literal_eval(f.read(size).decode("latin1"))
    if not isinstance(header, dict) or not isinstance(header.get("shape"), tuple):
        raise ValueError("header is not a dict with a shape")
    descr = header.get("descr")
    # ml_dtypes' float8_e5m2 is written as '<f1', which numpy cannot read back: it is raw bytes.
    dtype = np.dtype("V1") if isinstance(descr, str) and re.fullmatch(r"[<>|=]f1", descr) else np.dtype(descr)
    return tuple(header["shape"]), dtype


def _not_npz(path: Path) -> str:
    """The one-line error for a file ``zipfile`` cannot open, saying what the file is instead."""
    try:
        with open(path, "rb") as fp:
            head = fp.read(6)
    except OSError:
        head = b""
    hint = "np.savez writes one, with arrays p0, p1, ..."
    if head.startswith(b"PK"):
        return f"{path}: not a readable .npz archive (a damaged zip archive; {hint})"
    what = ("it holds a single .npy array" if head.startswith(b"\x93NUMPY") else "it is empty" if not head
            else "it is not a zip archive")
    return f"{path}: not an .npz archive ({what}; {hint})"


def check_npz_headers(module: Module, path: str | Path, check: Any = None) -> dict[str, str]:
    """Check an ``.npz``'s arrays against the entry parameters from their headers alone.

    ``check(path, key, parameter, shape, dtype) -> numpy dtype`` judges each header (default
    :func:`check_array`: the parameter's own shape; an SPMD module's global inputs pass their own).

    Nothing is decompressed past each member's ``.npy`` header, so a small file that would inflate to
    gigabytes (or an array of the wrong shape) is refused before any memory is spent on it. Also checks
    that each member's declared uncompressed size is what its header's shape and dtype need.

    Returns:
        parameter key (``p0`` or the parameter's name, as found) -> member name in the archive.

    Raises:
        InputError: not a readable ``.npz``; a parameter missing; an array of the wrong shape or dtype; an
            unknown array; a member whose size does not match its header.
    """
    path = Path(path)
    try:
        z = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile, ValueError) as e:
        if isinstance(e, OSError) and not isinstance(e, zipfile.BadZipFile):
            raise InputError(f"{path}: cannot read inputs: {e.strerror or e}") from None
        raise InputError(_not_npz(path)) from None
    params = module.entry.parameters
    with z:
        members = {i.filename.removesuffix(".npy"): i for i in z.infolist() if not i.is_dir()}
        keys: dict[str, str] = {}
        for p in params:
            n = p.parameter_number
            key = f"p{n}" if f"p{n}" in members else p.name if p.name in members else None
            if key is None:
                raise InputError(f"{path}: no array for parameter {n} (%{p.name}); expected key 'p{n}' or '{p.name}'")
            if p.shape.is_tuple:
                raise InputError(f"{path}: parameter {n} (%{p.name}) has a tuple shape; .npz inputs must be arrays")
            info = members[key]
            try:
                shape, dtype = _npy_header(z, info)
            except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, SyntaxError) as e:
                raise InputError(f"{path}: array '{key}' has no readable .npy header: "
                                 f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
            want = (check or check_array)(path, key, p, shape, dtype)
            data_bytes = want.itemsize * int(np.prod(shape, dtype=np.int64))
            if info.file_size > data_bytes + 65536:  # header (<64 KiB) + data, nothing more
                raise InputError(f"{path}: array '{key}' inflates to {info.file_size:,} bytes, but its header "
                                 f"describes {data_bytes:,} bytes of data")
            keys[key] = info.filename
        check_keys(path, params, members)
    return keys


def check_array(where: Any, key: str, p: Any, shape: tuple, dtype: np.dtype) -> np.dtype:
    """Refuse an input array for parameter ``p`` (an entry ``parameter`` instruction) whose shape or dtype is
    not the parameter's: no silent cast (``.npz`` inputs and :func:`fusegen.api.inputs_for` alike). ml_dtypes
    types stored as raw bytes of the same item size (``np.savez``) pass. Returns the parameter's numpy dtype.

    Raises:
        InputError: ``WHERE: array 'KEY' for parameter N (%name) has shape/dtype ..., expected ...``.
    """
    n, want = p.parameter_number, dtypes.numpy_dtype(p.shape.element_type)
    if tuple(shape) != tuple(p.shape.dimensions):
        raise InputError(f"{where}: array '{key}' for parameter {n} (%{p.name}) has shape {list(shape)}, "
                         f"expected {list(p.shape.dimensions)}")
    if dtype != want and not (_is_ml_dtype(want) and dtype.kind == "V" and dtype.itemsize == want.itemsize):
        raise InputError(f"{where}: array '{key}' for parameter {n} (%{p.name}) has dtype {dtype}, "
                         f"expected {want} ({p.shape.element_type})")
    return want


def check_keys(where: Any, params: list, keys: Any) -> None:
    """Refuse input keys that name no parameter (``p0``, ``p1`` ... or a parameter's name): a typo would
    otherwise be silently replaced by nothing.

    Raises:
        InputError: naming the unknown keys.
    """
    known = {f"p{p.parameter_number}" for p in params} | {p.name for p in params}
    unknown = sorted(set(keys) - known)
    if unknown:
        raise InputError(f"{where}: arrays {unknown[:8]} match no parameter of the entry computation "
                         f"(expected p0..p{len(params) - 1} or parameter names)")


def from_npz_dtype(arr: np.ndarray, want: np.dtype) -> np.ndarray:
    """``arr`` as read from an ``.npz``, retyped to ``want`` when ``np.savez`` stored it as raw bytes.

    numpy records an ml_dtypes array (bf16, the f8/f4 types, s4/u4, s2/u2) as a plain void type of its item
    size (``|V2`` for bf16), so ``np.load`` gives bytes back; ml_dtypes users read them with
    ``.view(ml_dtypes.bfloat16)``, and so does this function when the parameter's type has that item size.
    Any other array is returned as it is.
    """
    raw = arr.dtype.kind == "V" and arr.dtype.fields is None and arr.dtype.type is np.void
    if raw and _is_ml_dtype(want) and arr.dtype.itemsize == want.itemsize:
        return arr.view(want)
    return arr


def _is_ml_dtype(dt: np.dtype) -> bool:
    return dt.type.__module__.split(".")[0] == "ml_dtypes"


def _read_npz_member(data: Any, key: str) -> np.ndarray:
    """``data[key]``; an array ``np.savez`` wrote with the descriptor ``'<f1'`` (what ml_dtypes' float8_e5m2
    reports, and numpy cannot read back) is read as raw bytes ``|V1``."""
    try:
        return data[key]
    except ValueError as e:
        if "descr" not in str(e):
            raise
    with data.zip.open(f"{key}.npy") as fp:
        major, _ = np.lib.format.read_magic(fp)
        size = int.from_bytes(fp.read(2 if major == 1 else 4), "little")
        header = ast.literal_eval(fp.read(size).decode("latin1"))
        if not re.fullmatch(r"[<>|=]f1", str(header.get("descr"))):
            raise ValueError(f"descr {header.get('descr')!r} is not a valid dtype descriptor")
        shape = tuple(header["shape"])
        flat = np.frombuffer(fp.read(), dtype=np.dtype("V1"), count=int(np.prod(shape, dtype=np.int64)))
    return flat.reshape(shape, order="F" if header.get("fortran_order") else "C")


def save_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez`` with every ml_dtypes array (bf16, f8, f4, s4 ...) stored as raw bytes of its item size
    (``|V2``, ``|V1``), as numpy stores most of them already; ``np.load(path)[k].view(ml_dtypes.bfloat16)``
    reads one back, and :func:`load_inputs` reads them as the parameter's type.

    Raises:
        OSError: the file cannot be written.
    """
    np.savez(path, **{k: a.view(f"V{a.dtype.itemsize}") if _is_ml_dtype(a.dtype) else a for k, a in arrays.items()})


def load_inputs(module: Module, path: str | Path) -> list[Any]:
    """Read entry parameters from an ``.npz`` keyed ``p0``, ``p1``... or by parameter name.

    The archive's headers are checked first (:func:`check_npz_headers`); only then are arrays read.
    ml_dtypes arrays (bf16, f8, s4 ...) saved with ``np.savez`` come back as raw bytes (``|V2``); they are read
    as the parameter's type when the item size agrees (:func:`from_npz_dtype`).

    Raises:
        InputError: a parameter is missing, or its array has the wrong shape or dtype, or the archive is
            not what its headers say.
    """
    path = Path(path)
    keys = check_npz_headers(module, path)
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as e:
        raise InputError(f"{path}: cannot read inputs: {e}") from None
    out = []
    with data:
        for p in module.entry.parameters:
            n = p.parameter_number
            key = f"p{n}" if f"p{n}" in keys else p.name
            try:
                arr = _read_npz_member(data, key)
            except (ValueError, OSError, EOFError, SyntaxError, zipfile.BadZipFile, zlib.error) as e:
                raise InputError(f"{path}: array '{key}' cannot be read: {e}") from None
            want = dtypes.numpy_dtype(p.shape.element_type)
            arr = from_npz_dtype(arr, want)
            if tuple(arr.shape) != tuple(p.shape.dimensions) or arr.dtype != want:
                raise InputError(f"{path}: array '{key}' for parameter {n} (%{p.name}) is not what its header said")
            out.append(arr)
    return out


def load_expected(path: str | Path, n: int, names: list[str] | None = None,
                  types: list[str] | None = None) -> list[np.ndarray]:
    """The arrays of ``--expected OUT.npz``: ``o0``, ``o1``, ... (or ``names``), ``n`` of them.

    ``types`` (the output leaves' HLO element types) retype arrays ``np.savez`` stored as raw bytes (``|V2``
    for bf16, ``|V1``, or ``'<f1'``, which numpy cannot read back, for float8_e5m2) as the output's type,
    the way :func:`load_inputs` reads parameters.

    Raises:
        ValueError: unreadable file, a missing array, or an array whose item size does not fit its output's
            type (the message names the file and the key).
    """
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ValueError(f"--expected {path}: cannot read ({e})") from None
    out = []
    with z:
        files = set(z.files)
        for i in range(n):
            keys = [f"o{i}"] + ([names[i]] if names and i < len(names) else [])
            hit = next((k for k in keys if k in files), None)
            if hit is None:
                raise ValueError(f"--expected {path}: no array {keys[0]!r} for output {i} (has: "
                                 f"{', '.join(sorted(files)) or 'none'})")
            try:
                arr = _read_npz_member(z, hit)
            except (ValueError, OSError, EOFError, SyntaxError, zipfile.BadZipFile, zlib.error) as e:
                raise ValueError(f"--expected {path}: array {hit!r} cannot be read ({e})") from None
            if types is not None and i < len(types):
                try:
                    want = dtypes.numpy_dtype(types[i])
                except dtypes.UnsupportedTypeError:
                    want = None
                if want is not None:
                    arr = from_npz_dtype(arr, want)
                    if arr.dtype.type is np.void and arr.dtype != want:
                        raise ValueError(f"--expected {path}: array {hit!r} holds {arr.dtype.itemsize}-byte raw "
                                         f"items; output {i} is {types[i]} ({want.itemsize} bytes)")
            out.append(arr)
    return out


def leaves(value: Any) -> list[np.ndarray]:
    """Array leaves of a value (a tuple is flattened in order)."""
    if isinstance(value, tuple):
        return [x for v in value for x in leaves(v)]
    return [np.asarray(value)]
