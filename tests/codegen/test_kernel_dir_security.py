"""The kernel directory: private to the user, foreign or shared directories refused, planted bytecode never run."""

from __future__ import annotations

import importlib._bootstrap_external as bootstrap_external
import importlib.util
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from fusegen.codegen import triton_runtime
from fusegen.codegen.kernel import KernelParam, KernelSource, LaunchDimensions
from fusegen.codegen.kernel_dir import KernelDirError, kernel_dir, kernel_dir_path, private_dir
from fusegen.hlo.ir import Shape

_COPY_SRC = '''import triton
import triton.language as tl


@triton.jit
def copy_kernel(src, dst, BLOCK: tl.constexpr, N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)
'''

SMALL = """HloModule small
ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%a)
}
"""


def _kernel() -> KernelSource:
    s = Shape("f32", (8,))
    return KernelSource(name="copy_kernel", source=_COPY_SRC + f"# {uuid.uuid4().hex}\n", entry="copy_kernel",
                        params=(KernelParam("operand", 0, s), KernelParam("output", 0, s)),
                        constexprs={"BLOCK": 8, "N": 8}, launch=LaunchDimensions(grid=(1,), num_warps=1))


def test_default_directory_is_the_users_cache_dir_and_private(monkeypatch, tmp_path):
    import platformdirs

    monkeypatch.delenv("FUSEGEN_KERNEL_DIR", raising=False)
    assert kernel_dir_path() == Path(platformdirs.user_cache_dir("fusegen", appauthor=False)) / "kernels"
    target = tmp_path / "cache" / "kernels"
    monkeypatch.setenv("FUSEGEN_KERNEL_DIR", str(target))
    d = kernel_dir()
    assert d == target and (d.stat().st_mode & 0o777) == 0o700


@pytest.mark.parametrize("mode,word", [(0o777, "writable by others"), (0o770, "writable by its group"),
                                       (0o1777, "writable by others")])
def test_shared_writable_directory_is_refused(monkeypatch, tmp_path, mode, word):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, mode)
    monkeypatch.setenv("FUSEGEN_KERNEL_DIR", str(d))
    with pytest.raises(KernelDirError, match=word):
        kernel_dir()
    with pytest.raises(KernelDirError):
        triton_runtime.load_kernel(_kernel())
    assert list(d.iterdir()) == []  # nothing written into it either


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="planting a directory owned by another user needs root (chown)")
def test_directory_owned_by_another_user_is_refused(monkeypatch, tmp_path):
    d = tmp_path / "planted"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)  # nobody: the attacker who created the path first
    monkeypatch.setenv("FUSEGEN_KERNEL_DIR", str(d))
    with pytest.raises(KernelDirError, match="owned by uid 65534"):
        kernel_dir()


def test_symlink_and_file_are_refused(monkeypatch, tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(KernelDirError, match="symbolic link"):
        private_dir(link)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(KernelDirError, match="not a directory"):
        private_dir(f)


def test_planted_pyc_matching_the_generated_source_is_never_loaded(monkeypatch, tmp_path):
    kdir = tmp_path / "kernels"
    monkeypatch.setenv("FUSEGEN_KERNEL_DIR", str(kdir))
    ks = _kernel()
    path = kernel_dir() / f"k_{triton_runtime.source_hash(ks)}.py"
    path.write_text(ks.source, encoding="utf-8")
    marker = tmp_path / "pwned"
    evil = compile(f"open({str(marker)!r}, 'w').write('pwned')\n", str(path), "exec")
    st = path.stat()
    pyc = Path(importlib.util.cache_from_source(str(path)))
    pyc.parent.mkdir()
    pyc.write_bytes(bootstrap_external._code_to_timestamp_pyc(evil, st.st_mtime, st.st_size))

    # The plain import machinery trusts that bytecode (this is what the test guards against) ...
    spec = importlib.util.spec_from_file_location("fusegen_test_plain_import", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert marker.read_text() == "pwned"
    marker.unlink()

    # ... fusegen compiles the checked source and ignores it.
    fn = triton_runtime.load_kernel(ks, interpret=True)
    assert not marker.exists()
    assert fn.__name__ == "copy_kernel" if hasattr(fn, "__name__") else fn.fn.__name__ == "copy_kernel"
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    triton_runtime.run_interpreted(ks, [x, y])
    assert np.array_equal(x, y) and not marker.exists()


def test_tampered_kernel_file_is_rewritten_before_import(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEGEN_KERNEL_DIR", str(tmp_path / "k"))
    ks = _kernel()
    path = kernel_dir() / f"k_{triton_runtime.source_hash(ks)}.py"
    marker = tmp_path / "pwned"
    path.write_text(f"open({str(marker)!r}, 'w').write('pwned')\n" + ks.source)
    triton_runtime.load_kernel(ks, interpret=True)
    assert not marker.exists() and path.read_text() == ks.source


def test_cli_refuses_a_shared_kernel_directory_in_one_line(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    hlo = tmp_path / "small.hlo"
    hlo.write_text(SMALL)
    env = dict(os.environ, FUSEGEN_KERNEL_DIR=str(d))
    env.pop("FUSEGEN_DEBUG", None)
    p = subprocess.run([sys.executable, "-m", "fusegen.cli", "run", "--no-compile", str(hlo)], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "writable by others" in lines[0] and "Traceback" not in p.stderr
