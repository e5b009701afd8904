"""fusegen patches Triton's interpreter only while its own runs interpret a kernel
(:func:`fusegen.codegen.interpreter_patches.patched_interpreter`): a user's own Triton kernels interpreted in the
same process before and after ``fusegen.run`` give exactly what a process that never imported fusegen gives, every
attribute of Triton's interpreter and of ``triton.language`` is the original object afterwards (also after a kernel
that raised), and the installed Triton is checked against the pinned release."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
import tomllib
import types

import ml_dtypes
import numpy as np
import pytest
from conftest import REPO

import fusegen
from fusegen.codegen import interpreter_patches as ip
from fusegen.codegen import triton_runtime
from fusegen.codegen.kernel import KernelParam, KernelSource, LaunchDimensions
from fusegen.hlo.ir import Shape

#: A user's module: its own kernels, its own numpy adapter, no fusegen. ``run_all()`` gives every result.
USER_MODULE = '''
import ml_dtypes
import numpy as np
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction


class Arr:
    """What the interpreter reads of a tensor, for a numpy array."""

    def __init__(self, a=None):
        self.arr, self.dtype = a, (None if a is None else a.dtype)

    def data_ptr(self):
        return self.arr.ctypes.data

    def untyped_storage(self):
        return self

    def cpu(self):
        return self

    def storage_offset(self):
        return 0

    def size(self):
        return self.arr.shape

    def stride(self):
        return (1,)

    def new_empty(self, *args, **kwargs):
        return Arr()

    def set_(self, storage, offset, size, stride):
        self.arr, self.dtype = storage.arr, storage.dtype
        return self

    def copy_(self, other):
        return self


@triton.jit
def narrow(x_ptr, h_ptr, e_ptr, b_ptr, f_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    h = tl.load(h_ptr + offs)
    tl.store(e_ptr + offs, tl.exp(x))
    b = x.to(tl.bfloat16)
    tl.store(b_ptr + offs, b * b + b)
    tl.store(f_ptr + offs, h * h - h / 3.0)


@triton.jit
def division(a_ptr, b_ptr, q_ptr, r_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    tl.store(q_ptr + offs, a // b)
    tl.store(r_ptr + offs, a % b)
    tl.store(q_ptr + N + offs, a // 7)
    tl.store(r_ptr + N + offs, a % 7)


@triton.jit
def moves(src, idx_ptr, dst, N: tl.constexpr):
    offs = tl.arange(0, N)
    i = tl.load(idx_ptr + offs)
    m = (offs % 3) != 0
    v = tl.load(src + i, mask=m, other=-1.5)
    tl.store(dst + (N - 1 - offs), tl.where(v > 0, v, -v), mask=m)
    tl.store(dst + N + offs, v * 0.5 + 1.0)


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M: tl.constexpr):
    r = tl.arange(0, M)
    tile = r[:, None] * M + r[None, :]
    tl.store(c_ptr + tile, tl.dot(tl.load(a_ptr + tile), tl.load(b_ptr + tile)))


@triton.jit
def bf16_atomic(dst, val_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.atomic_add(dst + offs % 4, tl.load(val_ptr + offs))


def _run(kernel, *arrays, **constexprs):
    InterpretedFunction(kernel.fn)[(1,)](*[Arr(a) for a in arrays], **constexprs)


def run_all():
    rng = np.random.default_rng(44)
    x = (rng.standard_normal(256) * 3).astype(np.float32)
    h = (rng.standard_normal(256) * 5).astype(np.float16)
    e, f = np.zeros(256, np.float32), np.zeros(256, np.float16)
    b = np.zeros(256, ml_dtypes.bfloat16)
    _run(narrow, x, h, e, b, f, N=256)
    a = rng.integers(-1000, 1000, 256).astype(np.int32)
    d = rng.integers(-9, 10, 256).astype(np.int32)
    d[d == 0] = 5
    q, r = np.zeros(512, np.int32), np.zeros(512, np.int32)
    _run(division, a, d, q, r, N=256)
    src = rng.standard_normal(300).astype(np.float32)
    idx = rng.integers(0, 300, 128).astype(np.int32)
    dst = np.full(256, 9.0, np.float32)
    _run(moves, src, idx, dst, N=128)
    ma, mb = rng.standard_normal((2, 16, 16)).astype(np.float32)
    c = np.zeros((16, 16), np.float32)
    _run(matmul, ma, mb, c, M=16)
    acc = np.zeros(4, ml_dtypes.bfloat16)
    try:
        _run(bf16_atomic, acc, rng.standard_normal(64).astype(ml_dtypes.bfloat16), N=64)
        atomic = "ran: " + repr(acc.astype(np.float32).tolist())
    except Exception as err:
        atomic = type(err).__name__ + ": " + str(err)
    return {"exp": e, "bf16": b.view(np.uint16), "f16": f, "quotient": q, "remainder": r, "moves": dst, "dot": c,
            "bf16_atomic_add": np.array(atomic), "dividend": a, "divisor": d}
'''


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """The user's module, imported here, and what it gives in a fresh process that never imported fusegen."""
    d = tmp_path_factory.mktemp("user")
    (d / "user_kernels.py").write_text(USER_MODULE)
    code = ("import sys, numpy as np\nsys.path.insert(0, sys.argv[1])\nimport user_kernels\n"
            "np.savez(sys.argv[2], **user_kernels.run_all())\n"
            "assert not [m for m in sys.modules if m.startswith('fusegen')]\n")
    r = subprocess.run([sys.executable, "-c", code, str(d), str(d / "plain.npz")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    plain = dict(np.load(d / "plain.npz"))
    spec = importlib.util.spec_from_file_location("user_kernels_in_process", d / "user_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, plain


def _same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].tobytes() == want[k].tobytes(), k


def _triton_state() -> dict:
    """Every attribute of Triton's interpreter module, its builder, semantic and reduce/scan classes, and of
    ``triton.language`` that fusegen or the interpreter could rebind."""
    import triton.language as tl
    from triton.runtime import interpreter as interp

    owners = {"interpreter": interp, "InterpreterBuilder": interp.InterpreterBuilder, "ReduceOps": interp.ReduceOps,
              "ScanOps": interp.ScanOps, "InterpreterOptions": interp.InterpreterOptions,
              "interpreter_builder": interp.interpreter_builder, "interpreter_semantic": interp.interpreter_semantic,
              "options": interp.interpreter_builder.options, "tl": tl, "tl.core": tl.core, "tl.tensor": tl.tensor,
              "tl.math": tl.math}
    return {(o, k): v for o, obj in owners.items() for k, v in vars(obj).items()}


def _assert_restored(before: dict) -> None:
    after = _triton_state()
    changed = [k for k, v in before.items() if after.get(k, before) is not v]
    assert not changed, changed
    added = [k for k in after.keys() - before.keys() if not isinstance(after[k], types.ModuleType)]
    assert not added, added  # (a submodule imported meanwhile is no patch)


_FUSION = """HloModule exp_to_bf16

fused {
  p = f32[256]{0} parameter(0)
  e = f32[256]{0} exponential(p)
  ROOT c = bf16[256]{0} convert(e)
}

ENTRY main {
  x = f32[256]{0} parameter(0)
  ROOT f = bf16[256]{0} fusion(x), kind=kLoop, calls=fused
}
"""


def test_user_kernels_run_as_plain_triton_before_and_after_a_fusegen_run(user):
    mod, plain = user
    _same(mod.run_all(), plain)  # before
    assert plain["bf16_atomic_add"].item().startswith("InterpreterError")  # plain Triton has no bf16 atomic add
    before = _triton_state()

    x = np.linspace(-6, 6, 256, dtype=np.float32)
    res = fusegen.run(_FUSION, inputs=[x], compile=False)
    # the run's kernel did run patched: exp as exp2 of the f32-rounded x*log2(e), then bf16 rounded to nearest even
    want = np.exp2(x * ip.LOG2E_F32).astype(ml_dtypes.bfloat16)
    assert res.status == "ok" and res.outputs.view(np.uint16).tolist() == want.view(np.uint16).tolist()
    truncated = np.exp(x).view(np.uint32) >> 16  # what plain Triton's interpreter would have stored
    assert (truncated.astype(np.uint16) != want.view(np.uint16)).sum() > 50

    _assert_restored(before)
    _same(mod.run_all(), plain)  # after


def test_the_patches_change_these_user_kernels_inside_the_scope(user):
    """What the first test compares could tell: inside fusegen's scope the same kernels compute otherwise."""
    import fusegen_plugins.emitters.scatter  # noqa: F401 - registers its bf16 atomic add

    mod, plain = user
    before = _triton_state()
    with ip.patched_interpreter():
        patched = mod.run_all()
    _assert_restored(before)
    for k in ("exp", "bf16", "dot"):
        assert patched[k].tobytes() != plain[k].tobytes(), k
    assert patched["bf16_atomic_add"].item().startswith("ran: ")
    for k in ("quotient", "remainder", "moves", "f16"):  # the fast paths keep Triton's values
        assert patched[k].tobytes() == plain[k].tobytes(), k
    # both give C's truncating division of negative operands, as compiled code does
    a, d = plain["dividend"].astype(np.int64), plain["divisor"].astype(np.int64)
    assert (a < 0).any() and (d < 0).any()
    for div, q, r in ((d, plain["quotient"][:256], plain["remainder"][:256]),
                      (7, plain["quotient"][256:], plain["remainder"][256:])):
        want = np.trunc(a / div).astype(np.int64)
        assert q.tolist() == want.tolist() and r.tolist() == (a - want * div).tolist()


_RAISES = '''import triton
import triton.language as tl

@triton.jit
def k(x, y, BLOCK: tl.constexpr):
    v = tl.load(x + tl.arange(0, BLOCK))
    tl.static_assert(BLOCK > 1000, "the kernel raises")
    tl.store(y + tl.arange(0, BLOCK), v)
'''


def _raising_kernel() -> KernelSource:
    s = Shape("f32", (64,))
    return KernelSource(name="k", source=_RAISES, entry="k", params=(KernelParam("operand", 0, s),
                        KernelParam("output", 0, s)), constexprs={"BLOCK": 64}, launch=LaunchDimensions((1,)))


def test_a_kernel_that_raises_inside_a_run_leaves_triton_restored():
    from triton.runtime.errors import InterpreterError

    before = _triton_state()
    with pytest.raises(InterpreterError, match="the kernel raises"):
        triton_runtime.run_interpreted(_raising_kernel(), [np.ones(64, np.float32), np.zeros(64, np.float32)])
    _assert_restored(before)
    # nested scopes: only the outermost restores, also when the inner block raises
    from triton.runtime import interpreter as interp

    with pytest.raises(InterpreterError):
        with ip.patched_interpreter():
            with pytest.raises(InterpreterError):
                triton_runtime.run_interpreted(_raising_kernel(), [np.ones(64, np.float32), np.zeros(64, np.float32)])
            assert interp.interpreter_builder is ip.fusegen_builder()  # still patched for the outer block
            assert interp.ReduceOps is not before[("interpreter", "ReduceOps")]
            triton_runtime.run_interpreted(_raising_kernel(), [np.ones(64, np.float32), np.zeros(64, np.float32)])
    _assert_restored(before)
    assert ip._DEPTH == 0


def test_concurrent_runs_keep_the_patches_until_the_last_ends():
    from triton.runtime import interpreter as interp

    before = _triton_state()
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with ip.patched_interpreter():
            entered.set()
            release.wait(30)

    t = threading.Thread(target=other)
    with ip.patched_interpreter():
        t.start()
        assert entered.wait(30)
    assert interp.interpreter_builder is ip.fusegen_builder()  # the other thread's run is still going
    release.set()
    t.join(30)
    _assert_restored(before)


def test_the_plugin_mixin_goes_through_the_scope():
    import fusegen_plugins.emitters.scatter as scatter
    from triton.runtime import interpreter as interp

    b = ip.fusegen_builder()
    assert scatter.Bf16AtomicAdd in type(b).__mro__
    assert interp.InterpreterBuilder.create_atomic_rmw.__module__ == "triton.runtime.interpreter"
    assert type(interp.interpreter_builder) is interp.InterpreterBuilder
    with pytest.raises(TypeError, match="takes a class"):
        ip.register_builder_mixin(lambda: None)


# ------------------------------------------------------------------------------------------------ the version
def test_pinned_version_is_pyprojects():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"triton=={ip.PINNED_TRITON_VERSION}" in deps
    assert ip.installed_triton_version() == ip.PINNED_TRITON_VERSION  # this environment installs the pin
    assert ip.triton_version_problem(ip.PINNED_TRITON_VERSION) is None
    assert ip.triton_version_problem(ip.PINNED_TRITON_VERSION + "+git1234") is None
    assert ip.triton_version_problem(None) is None
    msg = ip.triton_version_problem("3.10.1")
    assert "Triton 3.10.1 is installed" in msg and f"pip install 'triton=={ip.PINNED_TRITON_VERSION}'" in msg


def test_loading_fusegen_with_another_triton_warns_naming_both_versions():
    code = ("import importlib.metadata as md, warnings\n"
            "real = md.version\n"
            "md.version = lambda name: '3.10.1' if name == 'triton' else real(name)\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    import fusegen.codegen.triton_runtime\n"
            "from fusegen.codegen.interpreter_patches import TritonVersionWarning\n"
            "hits = [x for x in w if issubclass(x.category, TritonVersionWarning)]\n"
            "assert len(hits) == 1, [str(x.message) for x in w]\n"
            "print(hits[0].message)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=str(REPO))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "written for Triton 3.9.0, but Triton 3.10.1 is installed" in r.stdout
    assert "pip install 'triton==3.9.0'" in r.stdout
    r = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", "import fusegen.codegen.triton_runtime"],
                       capture_output=True, text=True, timeout=300, cwd=str(REPO))
    assert r.returncode == 0, r.stderr[-2000:]  # the pinned release: no warning


def test_a_renamed_internal_stops_the_run_naming_it(monkeypatch):
    from triton.runtime import interpreter as interp

    before = _triton_state()
    monkeypatch.delattr(interp.InterpreterBuilder, "create_exp")
    x = np.linspace(-6, 6, 256, dtype=np.float32)
    with pytest.raises(ip.TritonInternalsError, match=r"InterpreterBuilder\.create_exp is missing.*"
                                                      r"pip install 'triton==3\.9\.0'"):
        fusegen.run(_FUSION, inputs=[x], compile=False)  # not one fusion's error: the run stops
    monkeypatch.setattr(interp.InterpreterBuilder, "create_exp", lambda self: None, raising=False)
    with pytest.raises(ip.TritonInternalsError, match=r"InterpreterBuilder\.create_exp takes \(self\), "
                                                      r"fusegen's override \(self, arg\)"):
        triton_runtime.run_interpreted(_raising_kernel(), [np.ones(64, np.float32), np.zeros(64, np.float32)])
    monkeypatch.undo()
    _assert_restored(before)
    assert fusegen.run(_FUSION, inputs=[x], compile=False).status == "ok"  # checked again, and fine


def test_the_cli_exits_2_naming_the_internal(monkeypatch, tmp_path):
    from click.testing import CliRunner
    from triton.runtime import interpreter as interp

    from fusegen.cli.main import cli

    hlo = tmp_path / "m.hlo"
    hlo.write_text(_FUSION)
    monkeypatch.delattr(interp.InterpreterBuilder, "create_dot")
    res = CliRunner().invoke(cli, ["run", str(hlo), "--no-compile", "--jobs", "1"])
    assert res.exit_code == 2, res.output
    assert "triton.runtime.interpreter.InterpreterBuilder.create_dot is missing" in res.output
    assert "internal error" not in res.output
