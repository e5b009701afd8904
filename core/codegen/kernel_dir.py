"""The directory generated kernels are imported from, kept private to the user.

Anyone who can write to the directory fusegen imports kernels from can have their code run by fusegen
(a planted module, or ``__pycache__`` bytecode that matches the generated source). So the directory is the
user's cache directory by the platform's conventions (``platformdirs.user_cache_dir``), created ``0700``,
and refused when it is a symlink, not a directory, owned by another user, or writable by group or others.
``FUSEGEN_KERNEL_DIR`` chooses another directory; it gets the same checks.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["KernelDirError", "kernel_dir", "kernel_dir_path", "private_dir", "read_regular"]


class KernelDirError(OSError):
    """The kernel directory is not safe to import code from (owner, permissions, not a directory)."""


def kernel_dir_path() -> Path:
    """Where kernels go, without creating or checking it: ``FUSEGEN_KERNEL_DIR`` or the user cache dir."""
    d = os.environ.get("FUSEGEN_KERNEL_DIR")
    if d:
        return Path(d)
    import platformdirs

    return Path(platformdirs.user_cache_dir("fusegen", appauthor=False)) / "kernels"


def private_dir(p: Path, what: str = "kernel directory") -> Path:
    """Create ``p`` with mode ``0700`` if missing; refuse it unless it is a real directory owned by this user
    that nobody else can write.

    Raises:
        KernelDirError: ``p`` is a symlink or not a directory, is owned by another user, or is writable by
            its group or by others (anyone who can write it could plant code that fusegen would import).
    """
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(p, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise KernelDirError(f"{what} {p}: cannot create it: {e.strerror or e}") from None
    try:
        st = os.lstat(p)
    except OSError as e:
        raise KernelDirError(f"{what} {p}: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode):
        raise KernelDirError(f"{what} {p} is a symbolic link; refusing to import kernels from it")
    if not stat.S_ISDIR(st.st_mode):
        raise KernelDirError(f"{what} {p} is not a directory")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise KernelDirError(f"{what} {p} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); "
                             "refusing to import kernels from it (set FUSEGEN_KERNEL_DIR to a directory of yours)")
    if st.st_mode & 0o022:
        raise KernelDirError(f"{what} {p} is writable by {'others' if st.st_mode & 0o002 else 'its group'} "
                             f"(mode {stat.S_IMODE(st.st_mode):o}); refusing to import kernels from it "
                             f"(chmod 700 it, or set FUSEGEN_KERNEL_DIR)")
    return p


def kernel_dir() -> Path:
    """The checked, private kernel directory (see :func:`private_dir`); created on first use.

    Raises:
        KernelDirError: the directory is not safe to import code from.
    """
    return private_dir(kernel_dir_path())


def read_regular(path: Path) -> str | None:
    """The text of regular file ``path`` (not following a symlink), or ``None`` when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
