"""The two-tier autotune cache: process memory, then a directory of JSON files.

Mirrors XLA's ``AutotunerCache`` (``xla/service/gpu/autotuning/autotuner_cache.cc``: in-memory map
first, per-fusion files in ``xla_gpu_per_fusion_autotune_cache_dir`` second, temp file + rename, no
write in READ mode) and the newer ``TieredCache`` (``xla/backends/autotuner/tiered_cache.cc``:
secondary hits promoted to the primary tier). Modes follow ``xla_gpu_experimental_autotune_cache_mode``:

* ``UPDATE`` (XLA's default): read every tier, write every tier.
* ``READ``: read every tier, never write the directory (the process memory still learns).
* ``WRITE_ONLY``: never read the directory (re-tune, refresh files); memory is still read, so
  identically shaped layers of one module are tuned once.

Files: ``<dir>/<sha256 hex of key>.json``, written to ``<dir>/.tmp-<digest>-<pid>-<ns>.json`` then
``os.replace`` d into place, which is atomic on POSIX and Windows, so concurrent writers of one key
leave one complete file (the last writer's) and readers never see a partial one; no lock is needed.
A file that is truncated, corrupt, or holds another key is reported with a warning naming it,
ignored (a miss), and overwritten by the re-tuned result; other entries are never touched. A file of a newer
``format_version`` (a newer fusegen's) is ignored the same way but never overwritten. Only
regular files of at most :data:`~fusegen.cache.format.MAX_ENTRY_BYTES` are read, without following
symlinks or blocking (a FIFO, a symlink to ``/dev/zero``, a directory or a deeply nested JSON file in
place of an entry is a bad entry like any other); a directory in place of an entry is moved aside
(``.<name>.not-an-entry-<ns>``, never deleted) when the re-tuned result is written. An entry whose
config its backend rejects (``lookup(validate=...)``) is reported and re-tuned the same way. Each bad
file is reported once per tier object.
"""

from __future__ import annotations

import json
import logging
import os
import time
import warnings
from pathlib import Path
import stat
from typing import Callable, Iterator

from fusegen.cache.format import (ENTRY_FORMAT, FORMAT_VERSION, CacheEntry, CacheFormatError, entry_from_text,
                                  read_bounded)
from fusegen.cache.key import CacheKey, is_digest

log = logging.getLogger("fusegen.cache")

MODES = ("UPDATE", "READ", "WRITE_ONLY")


class CacheWarning(UserWarning):
    """A cache file was ignored (corrupt, truncated, wrong key); the message names the file."""


class CachedConfigWarning(CacheWarning, RuntimeWarning):
    """A readable cache entry's config is not applied (a host winner for a GPU key, an unregistered backend); the
    message names the config and the instruction. Logged once too, so the CLI shows one line, not the warning."""


def normalize_mode(mode: str) -> str:
    """``update``/``UPDATE``/``1`` -> ``UPDATE`` (also ``READ``=2, ``WRITE_ONLY``=3; XLA's proto values).

    Raises:
        ValueError: an unknown mode, listing the valid ones.
    """
    m = str(mode).strip().upper().replace("-", "_").removeprefix("AUTOTUNE_CACHE_MODE_")
    m = {"1": "UPDATE", "2": "READ", "3": "WRITE_ONLY", "UNSPECIFIED": "UPDATE", "0": "UPDATE", "": "UPDATE",
         "READ_ONLY": "READ", "WRITE": "WRITE_ONLY"}.get(m, m)
    if m not in MODES:
        raise ValueError(f"xla_gpu_experimental_autotune_cache_mode must be one of {', '.join(MODES)}, got {mode!r}")
    return m


class InMemoryTier:
    """The process's own map from key digest to entry."""

    name = "memory"

    def __init__(self) -> None:
        self._entries: dict[str, CacheEntry] = {}

    def get(self, key: CacheKey) -> CacheEntry | None:
        e = self._entries.get(key.digest)
        return e if e is not None and e.key == key else None

    def put(self, entry: CacheEntry) -> None:
        self._entries[entry.digest] = entry

    def entries(self) -> Iterator[CacheEntry]:
        return iter(list(self._entries.values()))

    def clear(self) -> int:
        n = len(self._entries)
        self._entries.clear()
        return n

    def __len__(self) -> int:
        return len(self._entries)


class DirectoryTier:
    """One JSON file per key under ``path`` (created on first write).

    Raises:
        OSError: the directory cannot be created or written (reported by the caller with the path).
    """

    name = "directory"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._reported: set[tuple[str, str]] = set()

    def file_for(self, digest: str) -> Path:
        return self.path / f"{digest}.json"

    def read(self, f: Path) -> CacheEntry:
        """The entry in file ``f`` (bounded regular file, bounded JSON nesting, valid format).

        Raises:
            FileNotFoundError: no such file.
            CacheFormatError: anything else wrong with it, naming the file.
        """
        return entry_from_text(read_bounded(f), str(f))

    def get(self, key: CacheKey) -> CacheEntry | None:
        f = self.file_for(key.digest)
        try:
            entry = self.read(f)
        except FileNotFoundError:
            return None
        except CacheFormatError as e:
            self.report(f, str(e).removeprefix(f"{f}: "))
            return None
        if entry.key != key:
            self.report(f, "holds a different key than its file name says")
            return None
        return entry

    def report(self, f: Path, why: str) -> None:
        """Warn once (per tier and problem) that file ``f`` is ignored and its instruction re-tuned."""
        if (str(f), why) in self._reported:
            return
        self._reported.add((str(f), why))
        msg = f"ignoring autotune cache file {f}: {why}; the instruction will be re-tuned"
        log.warning(msg)
        warnings.warn(msg, CacheWarning, stacklevel=3)

    def _move_aside(self, target: Path) -> None:
        """A directory where an entry file belongs is renamed (kept, never deleted) so the entry can be written."""
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            aside = target.with_name(f".{target.name}.not-an-entry-{time.monotonic_ns()}")
            os.rename(target, aside)
            self.report(target, "is a directory, not a regular file")  # once, with get()'s words
            log.warning("moved directory %s aside to %s to write the autotune cache entry", target, aside.name)

    def _newer_format(self, target: Path) -> int | None:
        """The ``format_version`` of an entry file at ``target`` written by a newer fusegen (else ``None``)."""
        try:
            obj = json.loads(read_bounded(target))
        except (OSError, CacheFormatError, ValueError, RecursionError):  # not an entry of any format
            return None
        v = obj.get("format_version") if isinstance(obj, dict) and obj.get("format") == ENTRY_FORMAT else None
        return v if isinstance(v, int) and not isinstance(v, bool) and v > FORMAT_VERSION else None

    def put(self, entry: CacheEntry) -> Path | None:
        """Write atomically (temp file in the same directory, then ``os.replace``); the path written.

        An existing entry file of a newer format (a newer fusegen's, maybe a GPU measurement in a shared
        directory) is never overwritten: it is left in place with a :class:`CacheWarning` and ``None`` returned.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        digest = entry.digest
        newer = self._newer_format(self.file_for(digest))
        if newer is not None:
            msg = (f"{self.file_for(digest)}: format_version {newer} was written by a newer fusegen; left in place, "
                   f"not overwritten")
            log.warning(msg)
            warnings.warn(msg, CacheWarning, stacklevel=3)
            return None
        tmp = self.path / f".tmp-{digest}-{os.getpid()}-{time.monotonic_ns()}.json"
        data = entry.dumps().encode("utf-8")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            self._move_aside(self.file_for(digest))
            os.replace(tmp, self.file_for(digest))
        finally:
            if tmp.exists():
                tmp.unlink(missing_ok=True)
        return self.file_for(digest)

    def files(self) -> list[Path]:
        """Entry files (``<64 hex>.json``) in name order; temp and foreign files are not listed."""
        if not self.path.is_dir():
            return []
        # Every name of an entry is listed, whatever it is (a FIFO or a symlink is then reported as bad).
        return sorted(p for p in self.path.iterdir() if p.suffix == ".json" and is_digest(p.stem))

    def entries(self) -> Iterator[tuple[Path, CacheEntry | None, str]]:
        """``(file, entry or None, problem)`` for every entry file; nothing is deleted."""
        for f in self.files():
            try:
                e = self.read(f)
            except (OSError, CacheFormatError) as ex:
                yield f, None, str(ex).removeprefix(f"{f}: ")
                continue
            if e.digest != f.stem:
                yield f, None, "holds a different key than its file name says"
                continue
            yield f, e, ""

    def clear(self) -> int:
        """Remove entry files and stale temp files of this tier only; returns how many entries went."""
        n = 0
        for f in self.files():
            if os.path.isdir(f) and not os.path.islink(f):
                continue  # not an entry; never removed
            f.unlink(missing_ok=True)
            n += 1
        if self.path.is_dir():
            for p in self.path.glob(".tmp-*.json"):
                p.unlink(missing_ok=True)
        return n


class TieredCache:
    """Memory first, then the directory (when configured), under one mode.

    Attributes:
        stats: counters ``hits_memory``, ``hits_directory``, ``misses``, ``writes_directory``.
        rejected: directory entries whose config the ``validate`` callback of :meth:`lookup` refused.
    """

    def __init__(self, directory: str | os.PathLike | None = None, mode: str = "UPDATE",
                 memory: InMemoryTier | None = None):
        self.mode = normalize_mode(mode)
        self.memory = memory if memory is not None else InMemoryTier()
        self.directory = DirectoryTier(directory) if directory else None
        self.stats = {"hits_memory": 0, "hits_directory": 0, "misses": 0, "writes_directory": 0}
        self.rejected = 0  # directory entries a validator refused (each also counts as a miss)

    def lookup(self, key: CacheKey,
               validate: Callable[[CacheEntry], None] | None = None) -> tuple[CacheEntry | None, str]:
        """``(entry, "memory" | "directory")`` on a hit, ``(None, "miss")`` otherwise.

        ``validate(entry)`` is called on a directory entry before it is used; if it raises, the file is
        reported once (with the exception's message), not promoted, and the lookup is a miss.
        """
        e = self.memory.get(key)
        if e is not None:
            self.stats["hits_memory"] += 1
            return e, "memory"
        if self.directory is not None and self.mode != "WRITE_ONLY":
            e = self.directory.get(key)
            if e is not None and validate is not None:
                try:
                    validate(e)
                except Exception as ex:  # noqa: BLE001 - any rejection makes the entry a miss
                    why = str(ex).strip().splitlines()[0] if str(ex).strip() else type(ex).__name__
                    self.directory.report(self.directory.file_for(key.digest), f"config {e.result.config.name} "
                                          f"rejected by backend {e.result.config.backend!r}: {why}")
                    self.rejected += 1
                    e = None
            if e is not None:
                self.memory.put(e)  # promotion
                self.stats["hits_directory"] += 1
                return e, "directory"
        self.stats["misses"] += 1
        return None, "miss"

    def insert(self, entry: CacheEntry) -> None:
        """Store in memory and, unless mode is READ, in the directory."""
        self.memory.put(entry)
        if self.directory is not None and self.mode != "READ":
            if self.directory.put(entry) is not None:
                self.stats["writes_directory"] += 1
