"""The JSON form of cache entries and export bundles, validated on read (no pickle).

One entry (one file ``<dir>/<sha256 hex of the key>.json``)::

    {"format": "fusegen-autotune-cache-entry", "format_version": 2,
     "key": {"model": str, "hlo": str, "version": 50, "options_fingerprint": str},
     "result": {"config": {"backend": str, "values": {...}}, "backend_version": str,
                "duration_us": float | null, "scratch_bytes": int, "candidates": int,
                "failures": {"COMPILATION_FAILED": int, ...},
                "source": {"kind": "measured" | "estimated" | "cpu-interpreter" | "untimed", ...}},
     "created": "2026-...Z", "fusegen_version": "0.1.0"}

``result.source`` (:class:`fusegen.cache.provenance.Source`) says where ``duration_us`` came from. Format 1
files (no ``source``) are still read: their source is ``unknown``, a hint a GPU run re-measures; a version this
fusegen does not know is refused with a message naming it (the file is left in place).

An export bundle (``fusegen cache export``; XLA's ``xla_gpu_dump_autotune_results_to`` analogue)::

    {"format": "fusegen-autotune-results", "format_version": 2, "entries": [entry, ...]}
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import stat
from typing import Any

import attrs

from fusegen.cache.key import CacheKey, CacheKeyError
from fusegen.cache.provenance import UNKNOWN, Source, SourceError
from fusegen.codegen_backend import Config, ConfigError

ENTRY_FORMAT = "fusegen-autotune-cache-entry"
BUNDLE_FORMAT = "fusegen-autotune-results"
FORMAT_VERSION = 2
#: Versions this fusegen reads (1: before ``result.source``).
READABLE_VERSIONS = (1, 2)
_KINDS = ("COMPILATION_FAILED", "EXECUTION_FAILED", "REDZONE_CHECK_FAILED", "WRONG_RESULTS")


#: Largest cache entry file read (a real one is about 1 KiB).
MAX_ENTRY_BYTES = 1 << 20
#: Largest export bundle read by ``fusegen cache import``.
MAX_BUNDLE_BYTES = 256 << 20
#: Deepest JSON nesting accepted (a real entry nests 4 levels).
MAX_JSON_DEPTH = 32


class CacheFormatError(ValueError):
    """A cache file or bundle is malformed; the message starts with its source (file name)."""


def read_bounded(path: str | os.PathLike, limit: int = MAX_ENTRY_BYTES) -> str:
    """The UTF-8 text of a *regular* file of at most ``limit`` bytes.

    Opened without following a symlink and without blocking (a FIFO in place of the file neither hangs nor
    is read), then checked with ``fstat``; a device (``/dev/zero``), directory, FIFO or socket is refused,
    and a file that grows past ``limit`` while read is cut off and refused.

    Raises:
        FileNotFoundError: there is no such file.
        CacheFormatError: naming ``path`` and what it is instead.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        if os.path.islink(path):
            raise CacheFormatError(f"{path}: is a symbolic link, not a regular file") from None
        if os.path.isdir(path):
            raise CacheFormatError(f"{path}: is a directory, not a regular file") from None
        raise CacheFormatError(f"{path}: unreadable ({e.strerror or e})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a file")
        raise CacheFormatError(f"{path}: is {kind}, not a regular file")
    with os.fdopen(fd, "rb") as f:
        if st.st_size > limit:
            raise CacheFormatError(f"{path}: {st.st_size:,} bytes, more than the {limit:,} a cache file may have")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise CacheFormatError(f"{path}: more than the {limit:,} bytes a cache file may have")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CacheFormatError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _loads(text: str, source: str, what: str) -> Any:
    """``json.loads`` with the nesting bounded: a deeply nested file is a format error, not a RecursionError."""
    try:
        obj = json.loads(text)
    except RecursionError:
        raise CacheFormatError(f"{source}: JSON nested deeper than {MAX_JSON_DEPTH} levels; not {what}") from None
    stack = [(obj, 1)]
    while stack:  # no real entry nests past a few levels; deeper values would recurse in later code
        v, d = stack.pop()
        if d > MAX_JSON_DEPTH:
            raise CacheFormatError(f"{source}: JSON nested deeper than {MAX_JSON_DEPTH} levels; not {what}")
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return obj


@attrs.define
class TuneResult:
    """What the autotuner stores for one key."""

    config: Config
    backend_version: str = ""
    duration_us: float | None = None
    scratch_bytes: int = 0
    candidates: int = 0
    failures: dict[str, int] = attrs.field(factory=dict)
    source: Source = UNKNOWN

    def to_json(self) -> dict:
        return {"config": self.config.to_json(), "backend_version": self.backend_version,
                "duration_us": self.duration_us, "scratch_bytes": self.scratch_bytes,
                "candidates": self.candidates, "failures": dict(sorted(self.failures.items())),
                "source": self.source.to_json()}


@attrs.define
class CacheEntry:
    key: CacheKey
    result: TuneResult
    created: str = ""
    fusegen_version: str = ""

    @property
    def digest(self) -> str:
        return self.key.digest

    def to_json(self) -> dict:
        return {"format": ENTRY_FORMAT, "format_version": FORMAT_VERSION, "key": self.key.to_json(),
                "result": self.result.to_json(), "created": self.created or now_iso(),
                "fusegen_version": self.fusegen_version or _version()}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=False) + "\n"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _version() -> str:
    try:
        from fusegen import __version__

        return __version__
    except Exception:  # pragma: no cover
        return "?"


def _need(obj: dict, field: str, types, source: str, where: str = "") -> Any:
    v = obj.get(field)
    if not isinstance(v, types) or (isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,))):
        tn = types.__name__ if isinstance(types, type) else "/".join(t.__name__ for t in types)
        raise CacheFormatError(f"{source}: field {where}{field!r} must be {tn}, got {type(v).__name__}")
    return v


def entry_from_json(obj: Any, source: str) -> CacheEntry:
    """Validate and convert one entry.

    Raises:
        CacheFormatError: naming ``source`` and the first bad field.
    """
    if not isinstance(obj, dict):
        raise CacheFormatError(f"{source}: a cache entry must be a JSON object")
    if obj.get("format") != ENTRY_FORMAT:
        raise CacheFormatError(f"{source}: not a fusegen autotune cache entry (format={obj.get('format')!r})")
    version = obj.get("format_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise CacheFormatError(f"{source}: unsupported format_version {version!r} "
                               f"(this fusegen reads {', '.join(map(str, READABLE_VERSIONS))})")
    try:
        key = CacheKey.from_json(obj.get("key"))
    except CacheKeyError as e:
        raise CacheFormatError(f"{source}: {e}") from None
    res = _need(obj, "result", dict, source)
    try:
        config = Config.from_json(res.get("config"))
    except ConfigError as e:
        raise CacheFormatError(f"{source}: result.config: {e}") from None
    bv = _need(res, "backend_version", str, source, "result.")
    dur = res.get("duration_us")
    if dur is not None and (not isinstance(dur, (int, float)) or isinstance(dur, bool) or not math.isfinite(dur)):
        raise CacheFormatError(f"{source}: field result.'duration_us' must be a finite number or null")
    scratch = _need(res, "scratch_bytes", int, source, "result.")
    cands = _need(res, "candidates", int, source, "result.")
    fails = _need(res, "failures", dict, source, "result.")
    for k, v in fails.items():
        if k not in _KINDS or not isinstance(v, int) or isinstance(v, bool):
            raise CacheFormatError(f"{source}: result.failures has bad entry {k!r}: {v!r}")
    src = UNKNOWN
    if version >= 2:
        try:
            src = Source.from_json(res.get("source"), "result.source")
        except SourceError as e:
            raise CacheFormatError(f"{source}: {e}") from None
    created = obj.get("created", "")
    return CacheEntry(key, TuneResult(config, bv, None if dur is None else float(dur), scratch, cands, dict(fails),
                                      src),
                      created if isinstance(created, str) else "", str(obj.get("fusegen_version", "")))


def entry_from_text(text: str, source: str) -> CacheEntry:
    """Parse JSON text of one entry (``CacheFormatError`` on bad JSON, naming ``source``)."""
    try:
        obj = _loads(text, source, "a cache entry")
    except json.JSONDecodeError as e:
        raise CacheFormatError(f"{source}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                               f"truncated or corrupt") from None
    except CacheFormatError:
        raise
    except ValueError as e:  # e.g. an integer past Python's digit limit
        raise CacheFormatError(f"{source}: not valid JSON ({str(e).splitlines()[0][:120]})") from None
    return entry_from_json(obj, source)


def bundle_to_json(entries: list[CacheEntry]) -> dict:
    return {"format": BUNDLE_FORMAT, "format_version": FORMAT_VERSION,
            "entries": [e.to_json() for e in sorted(entries, key=lambda e: e.digest)]}


def bundle_from_text(text: str, source: str) -> list[CacheEntry]:
    """Entries of an export bundle.

    Raises:
        CacheFormatError: bad JSON, wrong format, or a bad entry (named by its index).
    """
    try:
        obj = _loads(text, source, "a results bundle")
    except json.JSONDecodeError as e:
        raise CacheFormatError(f"{source}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except CacheFormatError:
        raise
    except ValueError as e:
        raise CacheFormatError(f"{source}: not valid JSON ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(obj, dict) or obj.get("format") != BUNDLE_FORMAT:
        raise CacheFormatError(f"{source}: not a fusegen autotune results bundle (expected format {BUNDLE_FORMAT!r})")
    if obj.get("format_version") not in READABLE_VERSIONS:
        raise CacheFormatError(f"{source}: unsupported format_version {obj.get('format_version')!r} "
                               f"(this fusegen reads {', '.join(map(str, READABLE_VERSIONS))})")
    entries = obj.get("entries")
    if not isinstance(entries, list):
        raise CacheFormatError(f"{source}: field 'entries' must be a list")
    return [entry_from_json(e, f"{source}: entries[{i}]") for i, e in enumerate(entries)]
