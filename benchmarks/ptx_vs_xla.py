"""fusegen's sm_90 kernels against XLA's own kernels for the same fusions, in SASS (static, no GPU needed).

For every XLA kernel launch of a fusion in a launch corpus (default ``../shared/corpus/jax/launch``; pairing and
the rows left out: ``benchmarks/launch_rows.py``), both kernels are assembled by the same ``ptxas -arch=sm_90a -v``
and disassembled by ``cuobjdump -sass`` (:mod:`fusegen.codegen.sass`): XLA's from its PTX (``NAME.xla.ptx``, the
module holding the thunk's kernel), fusegen's compiled from its Triton source (buffers 16-byte aligned, as XLA's).
Per kernel, fusegen's against XLA's:

* tensor-core instructions (HMMA / IMMA / HGMMA / QGMMA ...);
* mean global access width: bytes a thread moves per global load / store / atomic instruction;
* global memory instructions per output element: static count x threads launched / output elements (XLA's
  block rounded up to whole warps; fusegen's grid x 32 x ``num_warps``). Static counts see a loop body once: a
  kernel that loops (``loops`` column) does more than this says;
* registers, spill bytes, shared memory (static + the launch's dynamic), SASS instructions x threads;
* launch dimensions: grid and block (the block Triton launches, ``num_warps`` x 32 threads), and the same with the
  kernel's shared memory; where only the shared memory differs for a known reason that is not fusegen's kernel to
  change (:func:`shared_difference`), or the block only by Triton's power-of-two warps, the row says why
  (``smem differs:`` / ``launch differs:`` under it in ``--kernels``, ``shared_difference`` / ``launch_difference``
  in ``--json``) and the summary counts it as explained, not equal.

Counts per kind and overall, as issue 28's "Done when" reads them: tensor cores where XLA uses them, spills where
XLA has none, kernels narrower than XLA's, over 1.5x XLA's memory instructions per output, over 1.25x XLA's
registers, launch dimensions (with shared memory) equal. A launch fusegen cannot pair or compile is a failure,
printed and counted, never dropped.

Usage: ``python benchmarks/ptx_vs_xla.py [--launch-dir DIR] [--module SUBSTR] [--limit N] [--jobs N] [--kernels]
[--markdown] [--json] [--cache-dir DIR | --no-cache]``. Compiling a kernel takes 1-15 s on a CPU; results are
cached (``fusegen.codegen.sass``), so reruns take seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fusegen.pow2 import is_pow2  # noqa: E402
from launch_rows import SHARED_LAUNCH, Launch, plan_launches, read_rows, xla_kind, xla_launch  # noqa: E402

#: ``--launch-dir`` default (kept as ``LAUNCH`` for callers of the earlier PTX version)
LAUNCH = SHARED_LAUNCH


# --------------------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------------------
def _measure(job: tuple) -> dict:
    """One compile in a worker: ``{"stats": SassStats.to_json()}`` or ``{"error": one line}``."""
    from fusegen.codegen import sass

    what, *args, cache_dir = job
    cache = {"cache_dir": cache_dir, "use_cache": cache_dir is not None}
    try:
        if what == "kernel":
            st = sass.kernel_sass_stats(args[0], **cache)
        else:
            path, entry, dyn = args
            st = sass.ptx_sass_stats(Path(path).read_text(), entry, dyn, **cache)
        return {"stats": st.to_json()}
    except Exception as e:  # noqa: BLE001 - every failure is a row's finding
        return {"error": f"{type(e).__name__}: {str(e)[:600]}"}


def _kernel_key(ks) -> tuple:
    return (ks.source, tuple(sorted(ks.constexprs.items())), ks.launch.num_warps, ks.num_stages, tuple(ks.scalar_types),
            tuple(p.shape.element_type for p in ks.params), ks.max_registers)


def _jobs(launches: list[Launch], launch_dir: Path, cache_dir) -> tuple[list[tuple], list[tuple[int | None, int | None]]]:
    """Distinct compiles (XLA's first: they are quick), and per launch the indices of its (XLA, fusegen) jobs."""
    jobs: list[tuple] = []
    index: dict[tuple, int] = {}

    def add(key: tuple, job: tuple) -> int:
        if key not in index:
            index[key] = len(jobs)
            jobs.append(job)
        return index[key]

    per: list[list[int | None]] = []
    for ln in launches:
        ptx = launch_dir / ln.row["module_file"].replace(".h200_opt.hlo", ".xla.ptx")
        dyn = xla_launch(ln.row)["shared_memory_bytes"]
        x = add(("ptx", str(ptx), ln.row["kernel_name"], dyn), ("ptx", str(ptx), ln.row["kernel_name"], dyn, cache_dir))
        per.append([x, None])
    for ln, p in zip(launches, per):
        if ln.kernel is not None:
            p[1] = add(("kernel",) + _kernel_key(ln.kernel), ("kernel", ln.kernel, cache_dir))
    return jobs, [tuple(p) for p in per]


def _run_jobs(jobs: list[tuple], n_workers: int, log) -> list[dict]:
    t0 = time.time()
    results: list[dict] = [{}] * len(jobs)
    step = max(1, len(jobs) // 10)
    if n_workers <= 1 or len(jobs) <= 1:
        for i, j in enumerate(jobs):
            results[i] = _measure(j)
            if (i + 1) % step == 0:
                log(f"  measured {i + 1}/{len(jobs)} ({time.time() - t0:.0f} s)")
        return results
    import multiprocessing as mp

    with ProcessPoolExecutor(n_workers, mp_context=mp.get_context("fork")) as pool:
        for i, res in enumerate(pool.map(_measure, jobs)):
            results[i] = res
            if (i + 1) % step == 0:
                log(f"  measured {i + 1}/{len(jobs)} ({time.time() - t0:.0f} s)")
    return results


def _side(stats: dict, threads: int, output_elements: int) -> dict:
    s = dict(stats, threads=threads)
    s["mem_insts_per_output"] = s["global_memory_instructions"] * threads / output_elements
    s["sass_x_threads"] = s["sass_instructions"] * threads
    return s


def _ratio(a: float, b: float) -> float | None:
    if b:
        return a / b
    return None if a == 0 else float("inf")


def _prod(v) -> int:
    n = 1
    for x in v:
        n *= int(x)
    return n


def row_of(ln: Launch, xla: dict, ours: dict | None) -> dict:
    """One output row: the launch, both sides' statistics and derived figures, ratios and flags."""
    r = ln.row
    xl = xla_launch(r)
    row: dict = {"module": r["module_file"], "fusion": r["fusion_name"], "kernel": r["kernel_name"], "kind": ln.kind,
                 "xla_kind": xla_kind(r), "emitter": ln.emitter, "paired": ln.how,
                 "output_elements": ln.output_elements, "xla_launch": xl}
    if "error" in xla:
        row["failure"] = f"XLA's kernel: {xla['error']}"
    else:
        warps = -(-_prod(xl["threads"]) // 32)
        row["xla"] = _side(xla["stats"], _prod(xl["grid"]) * 32 * warps, ln.output_elements)
    if ln.failure is not None:
        row["failure"] = ln.failure
        return row
    lj = ln.kernel.launch.to_json()
    row["fusegen_launch"] = {"kernel": ln.kernel.name, "grid": lj["grid"], "threads": lj["threads"],
                             "num_warps": ln.kernel.launch.num_warps}
    if "error" in ours:
        row["failure"] = ours["error"]
        return row
    f = ours["stats"]
    row["fusegen"] = _side(f, _prod(lj["grid"]) * 32 * (f["num_warps"] or ln.kernel.launch.num_warps),
                           ln.output_elements)
    if "xla" in row and "failure" not in row:
        x, f = row["xla"], row["fusegen"]
        row["ratios"] = {k: _ratio(f[k], x[k]) for k in ("registers", "mem_insts_per_output", "mean_global_access_bytes",
                                                         "sass_x_threads")}
        # the block Triton launches: num_warps x 32 threads, whatever the launch dimensions say
        launched = 32 * (f["num_warps"] or ln.kernel.launch.num_warps)
        stated = lj["grid"] == xl["grid"] and lj["threads"] == xl["threads"]
        grid_block = stated and launched == _prod(xl["threads"])
        row["launch_equal"] = grid_block
        row["launch_shared_equal"] = grid_block and f["shared_bytes"] == x["shared_bytes"]
        if grid_block and not row["launch_shared_equal"] and (why := shared_difference(row)) is not None:
            row["shared_difference"] = why
        if stated and not grid_block:
            block = _prod(xl["threads"])
            warps = -(-block // 32)
            if block % 32 and launched == 32 * warps:  # XLA's block is no whole number of warps (a scalar
                # fusion's 1 thread, a loop's 48): Triton launches the warps that hold it
                whole = "one warp" if warps == 1 else f"{warps} warps"
                row["launch_difference"] = f"Triton launches whole warps: {launched} threads ({whole}) for XLA's {block}"
            elif not is_pow2(warps):  # else Triton could launch XLA's block: fusegen chose other warps, unexplained
                row["launch_difference"] = (f"Triton launches a power-of-two number of warps: {launched} threads for "
                                            f"XLA's {_prod(xl['threads'])} ({warps} warps)")
        elif not stated and (packed := _packed_blocks(xl, _prod(lj["grid"]), launched)) is not None:
            row["launch_difference"] = packed
        row["flags"] = flags(row)
    return row


def _packed_blocks(xl: dict, programs: int, launched: int) -> str | None:
    """Why a launch of ``programs`` programs of ``launched`` threads stands for XLA's blocks of under a warp, when
    it runs XLA's threads exactly (rounded up to whole programs); else ``None``."""
    block, blocks = _prod(xl["threads"]), _prod(xl["grid"])
    if block >= 32 or programs != -(-blocks * block // launched):
        return None
    return (f"Triton launches whole warps: XLA's {blocks} blocks of {block} thread{'s' * (block > 1)} "
            f"({blocks * block} threads) run as {programs} programs of {launched}")


def shared_difference(row: dict) -> str | None:
    """Why a row's shared memory differs from XLA's at an equal grid and block, where the cause is known and is not
    fusegen's kernel to change; ``None``: unexplained.

    * a tiled transpose or column reduction (kind ``kTranspose``, a column-reduction emitter): XLA's kernel declares
      its ``R x C`` shared tile one element wider a row (``R x (C + 1)``, against bank conflicts:
      ``emitters/transpose.cc``, ``emitters/reduction.cc``); Triton's ``convert_layout`` scratch is the unpadded
      tile, swizzled, and plain Triton cannot declare a padded shared
      layout (Gluon's ``PaddedSharedLayout`` only, which Triton's interpreter does not run; and that one allocates
      up to the tile's last element, not the last row's pad: a 32 x 32 f32 tile padded one element a row takes
      4220 B in Triton 3.9 against XLA's 32 x 33 array of 4224 B, so no Triton kernel declares XLA's bytes
      exactly, shapes being powers of two). Read as XLA's bytes
      = fusegen's + 32 rows x element bytes, fusegen's a power-of-two C >= 16 times that; with ``k`` reductions
      (a column mean and mean of squares) XLA declares ``k`` padded tiles, Triton reuses its one in turn;
    * a small-column reduction: XLA's kernel transposes its partial results through a padded ``32 x (C + 1)`` tile,
      fusegen's reduces the rows of its ``[A, R, C]`` block with ``tl.reduce`` (its cross-warp scratch only);
    * a row reduction with 32 warps a row: XLA's cross-warp scratch is R x 33 elements (x_rowsum_long: 132 bytes for
      one row), Triton's R x 32;
    * a block-level fusion whose XLA kernel moves its tile to another register layout through shared memory (more
      ``STS`` and ``LDS`` / ``LDSM`` in XLA's SASS than fusegen's, which has only the cross-warp reduction's):
      XLA's Triton fork converts the layout of the loaded tile, fusegen's kernel reduces in the load's layout;
    * a scatter's compare-and-swap loop (``plugins/emitters/scatter.py``, ``cas``): fusegen's loop exits when every
      lane of the program has swapped, a block-wide vote through one int32 a warp (a Triton loop is uniform over
      its program); XLA's loop is per thread, with no shared memory;
    * a tiled sort launch (``TILE = 4 x`` XLA's threads): XLA's kernel keeps every operand's tile in shared memory
      (``TILE x`` the operands' bytes an element), fusegen's packed-key network gathers one tensor, the ``s64``
      keys (``8 x TILE``), and a one-warp block gathers by warp shuffles, in no shared memory
      (``plugins/emitters/sort_keys.py``, docs/sort.md);
    * an int8 GEMM of ``block_k`` 16 (the same ``IMMA.16832`` in both, XLA's global loads each half as wide, as
      many): XLA's Triton fork hands its 16-deep tiles to the K-32 ``mma.m16n8k32`` with each fragment repeated in
      both K halves (z_i8_mm's PTX: A ``{a0, a1, a0, a1}``, B ``{b0, b0}``, so every step's products enter the sum
      twice), staging 16-deep tiles; fusegen pads them to K 32 with zeroed lanes (upstream Triton's smallest int8
      ``tl.dot`` K, an exact product), staging tiles twice as deep. Matching XLA's bytes would mean matching its doubled sum.
    """
    f, x = row["fusegen"], row["xla"]
    fb, xb = f["shared_bytes"], x["shared_bytes"]
    pad = xb - fb
    tiled = row["kind"] == "kTranspose" or row.get("emitter") in ("ColumnReductionFusion", "SmallColumnReductionFusion")
    # 32 rows of 1-8 byte elements, one more a row
    if tiled and pad in (32, 64, 128, 256) and pad < fb and fb % pad == 0 and is_pow2(fb // pad) and fb // pad >= 16:
        return (f"XLA pads its {fb // pad}-column shared tile by one element a row against bank conflicts "
                f"(+{pad} B); Triton swizzles the unpadded tile (its one padded layout, Gluon's, ends at the last element, "
                f"{pad // 32} B short of XLA's array)")
    # a column reduction with k reductions (batch statistics: a mean and a mean of squares): XLA declares one
    # padded tile each, Triton's allocator gives their convert_layouts one unpadded tile in turn
    for k in range(2, 9):
        per, padk = xb // k, xb // k - fb
        if tiled and xb % k == 0 and padk in (32, 64, 128, 256) and fb % padk == 0 and is_pow2(fb // padk) \
                and fb // padk >= 16:
            return (f"XLA keeps one {fb // padk}-column shared tile padded by one element a row for each of its {k} "
                    f"reductions ({k} x {per} B); Triton reuses one unpadded, swizzled tile ({fb} B) for them in "
                    f"turn (Gluon's padded layout would end at each tile's last element)")
    # XLA's small-column reduction writes its partial sums to a 32 x (C + 1) tile and reads it transposed; fusegen's
    # reduces the rows of the [A, R, C] block with tl.reduce, whose cross-warp scratch is all it keeps
    if row.get("emitter") == "SmallColumnReductionFusion" and xb > fb and xb % 128 == 0 \
            and is_pow2(xb // 128 - 1):
        return (f"XLA's small-column reduction transposes its partial results through a padded 32 x "
                f"{xb // 128} tile of 4 B ({xb} B); fusegen's reduces the block's rows with tl.reduce, whose "
                f"cross-warp scratch ({fb} B) is all it keeps")
    rows = row.get("emitter") in ("RowReductionFusion", "MultiRowReductionFusion")
    if rows and 0 < pad < fb and fb % pad == 0 and fb // pad == 32:
        return (f"XLA pads its cross-warp scratch of 32 warps a row by one element a row against bank conflicts "
                f"(+{pad} B); Triton's reduction scratch is unpadded")
    warps = (row.get("fusegen_launch") or {}).get("num_warps") or 0
    if row["kind"] == "kScatter" and xb == 0 and warps and fb == 4 * warps and f.get("has_loop") \
            and f.get("global_atomics"):
        return ("fusegen's compare-and-swap loop runs until every lane of the program has swapped, a block-wide vote "
                f"through {fb} B (one int32 a warp): a Triton loop is uniform over its program, XLA's loop is per "
                "thread")
    if row["kind"] == "kSort" and (why := _sort_shared_difference(row, fb, xb)) is not None:
        return why
    if row["kind"] == "kTriton.gemm" and (why := _int8_k16_shared_difference(f, x, fb, xb)) is not None:
        return why
    xo, fo = x.get("shared_ops", {}), f.get("shared_ops", {})
    x_loads, f_loads = xo.get("LDS", 0) + xo.get("LDSM", 0), fo.get("LDS", 0) + fo.get("LDSM", 0)
    if row["kind"] == "kTriton.block" and xb > fb and xo.get("STS", 0) > fo.get("STS", 0) and x_loads > f_loads:
        return (f"XLA's Triton converts the tile's register layout through shared memory ({xo.get('STS', 0)} STS, "
                f"{x_loads} LDS/LDSM; fusegen's {fo.get('STS', 0)}, {f_loads}: the cross-warp reduction scratch "
                f"only); fusegen's kernel reduces in the load's layout")
    return None


def _widths(loads: dict) -> list[int]:
    """A ``{width: count}`` table (JSON keys strings) as one sorted list of widths, one an instruction."""
    return sorted(int(w) for w, n in loads.items() for _ in range(int(n)))


def _int8_k16_shared_difference(f: dict, x: dict, fb: int, xb: int) -> str | None:
    """:func:`shared_difference` of an int8 GEMM XLA tiles 16 deep: both on the same K-32 ``IMMA.16832``, XLA's
    operand loads each half the width of fusegen's 32-deep (padded) ones, fewer bytes of shared memory."""
    tc = f.get("tensor_core_ops") or {}
    if not tc or tc != x.get("tensor_core_ops") or not all(op.startswith("IMMA.16832") for op in tc):
        return None
    fw, xw = _widths(f.get("global_loads") or {}), _widths(x.get("global_loads") or {})
    if not fw or len(fw) != len(xw) or any(a != 2 * b for a, b in zip(fw, xw)) or not xb < fb:
        return None
    return (f"XLA's Triton fork feeds its 16-deep int8 tiles to the K-32 IMMA with each fragment repeated in both K "
            f"halves (each step's products summed twice), staging 16-deep tiles; fusegen pads them to K 32 with "
            f"zeroed lanes (upstream Triton's smallest int8 tl.dot K: the exact product), its staged tiles and "
            f"operand loads twice as deep (+{fb - xb} B)")


def _sort_shared_difference(row: dict, fb: int, xb: int) -> str | None:
    """:func:`shared_difference` of a tiled sort launch (packed keys: 8 bytes an element, none for one warp)."""
    threads = (row.get("xla_launch") or {}).get("threads") or [0]
    tile = 4 * threads[0]
    if not tile or xb <= 0 or xb % tile:
        return None
    per = xb // tile
    if fb == 8 * tile and per != 8:
        return (f"XLA keeps every operand's {tile}-element tile in shared memory ({per} B an element); fusegen's "
                f"network gathers one tensor, the s64 packed keys (8 B an element)")
    if fb == 0 and threads[0] <= 32:
        return (f"XLA keeps every operand's {tile}-element tile in shared memory ({per} B an element); fusegen's "
                f"one-warp block gathers its packed keys by warp shuffles")
    return None


def flags(row: dict) -> dict[str, bool]:
    """Which of the "Done when" conditions a compared row misses."""
    f, x, q = row["fusegen"], row["xla"], row["ratios"]
    return {"tensor_cores_missing": x["tensor_core_instructions"] > 0 and f["tensor_core_instructions"] == 0,
            "spills": f["spill_bytes"] > 0 and x["spill_bytes"] == 0,
            "narrower": x["global_memory_instructions"] > 0
            and f["mean_global_access_bytes"] + 1e-9 < x["mean_global_access_bytes"],
            "mem_insts_over_1_5": (q["mem_insts_per_output"] or 0) > 1.5,
            "registers_over_1_25": (q["registers"] or 0) > 1.25,
            "loop_where_xla_has_none": f["has_loop"] and not x["has_loop"]}


def compare(launch_dir: Path = LAUNCH, module_filter: str = "", limit: int | None = None, jobs: int = 2,
            cache_dir: str | os.PathLike | None = "", log=print) -> dict:
    """Rows, the rows left out, and the summary. ``cache_dir``: ``""`` the default SASS cache, ``None`` none."""
    from fusegen.codegen import sass

    if cache_dir == "":
        cache_dir = str(sass.default_cache_dir())
    rows, left = read_rows(launch_dir, module_filter)
    rows = rows[:limit] if limit is not None else rows
    log(f"{launch_dir}: {len(rows)} kernel launches ({len(left)} rows left out)")
    launches = plan_launches(launch_dir, rows, log)
    job_list, per = _jobs(launches, launch_dir, cache_dir)
    log(f"{len(job_list)} distinct kernels to measure, {jobs} workers")
    results = _run_jobs(job_list, jobs, log)
    out = [row_of(ln, results[x], results[f] if f is not None else None) for ln, (x, f) in zip(launches, per)]
    return {"launch_dir": str(launch_dir), "rows": out, "left_out": left, "summary": summarize(out)}


# --------------------------------------------------------------------------------------------------
# summary
# --------------------------------------------------------------------------------------------------
def _median(vals) -> float | None:
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def _counts(rs: list[dict], failed: int) -> dict:
    tc = [r for r in rs if r["xla"]["tensor_core_instructions"]]
    fl = lambda k: sum(r["flags"][k] for r in rs)  # noqa: E731
    return {"kernels": len(rs), "failed": failed,
            "tensor_cores_xla": len(tc), "tensor_cores_fusegen": sum(1 for r in tc if r["fusegen"]["tensor_core_instructions"]),
            "spills": fl("spills"), "narrower": fl("narrower"), "mem_insts_over_1_5": fl("mem_insts_over_1_5"),
            "registers_over_1_25": fl("registers_over_1_25"), "loops_where_xla_has_none": fl("loop_where_xla_has_none"),
            "launch_equal": sum(r["launch_equal"] for r in rs), "launch_shared_equal": sum(r["launch_shared_equal"] for r in rs),
            "launch_shared_explained": sum("shared_difference" in r or "launch_difference" in r for r in rs),
            "registers_ratio_median": _median(r["ratios"]["registers"] for r in rs),
            "width_ratio_median": _median(r["ratios"]["mean_global_access_bytes"] for r in rs),
            "mem_insts_per_output_ratio_median": _median(r["ratios"]["mem_insts_per_output"] for r in rs),
            "sass_x_threads_ratio_median": _median(r["ratios"]["sass_x_threads"] for r in rs)}


def summarize(rows: list[dict]) -> dict:
    """``{"kinds": {kind: counts}, "all": counts}``; counts as in :func:`_counts` (failures: rows not compared)."""
    kinds = sorted({r["kind"] for r in rows})
    comp = [r for r in rows if "ratios" in r]
    per = {k: _counts([r for r in comp if r["kind"] == k], sum(1 for r in rows if r["kind"] == k and "ratios" not in r))
           for k in kinds}
    return {"kinds": per, "all": _counts(comp, len(rows) - len(comp))}


# --------------------------------------------------------------------------------------------------
# printing
# --------------------------------------------------------------------------------------------------
def _f(v, nd: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "inf" if v == float("inf") else f"{v:.{nd}f}"
    return str(v)


COLUMNS = ["kind", "kernels", "failed", "tensor cores", "spills", "narrower", "mem/out >1.5x", "regs >1.25x",
           "launch =", "launch+smem =", "smem explained", "width med", "mem/out med", "regs med", "sass*thr med", "loops"]


def kind_cells(kind: str, c: dict) -> list[str]:
    """One summary line's cells, in :data:`COLUMNS` order (ratios are fusegen / XLA medians)."""
    if not c["kernels"]:
        return [kind, "0", str(c["failed"])] + ["-"] * (len(COLUMNS) - 3)
    return [kind, str(c["kernels"]), str(c["failed"]), f"{c['tensor_cores_fusegen']}/{c['tensor_cores_xla']}",
            str(c["spills"]), str(c["narrower"]), str(c["mem_insts_over_1_5"]), str(c["registers_over_1_25"]),
            str(c["launch_equal"]), str(c["launch_shared_equal"]), str(c["launch_shared_explained"]),
            _f(c["width_ratio_median"]),
            _f(c["mem_insts_per_output_ratio_median"]), _f(c["registers_ratio_median"]),
            _f(c["sass_x_threads_ratio_median"]), str(c["loops_where_xla_has_none"])]


def headline(summary: dict) -> list[str]:
    """The "Done when" lines, each with its goal."""
    a = summary["all"]
    n = a["kernels"]
    pct = lambda k: f"{100 * a[k] / n:.0f}%" if n else "-"  # noqa: E731
    return [f"{n} kernels compared, {a['failed']} failed or unpaired",
            f"tensor cores where XLA uses them: {a['tensor_cores_fusegen']}/{a['tensor_cores_xla']} (goal: all)",
            f"spills where XLA has none: {a['spills']} (goal 0)",
            f"kernels narrower than XLA's (mean global access width): {a['narrower']} (goal 0)",
            f"over 1.5x XLA's global memory instructions per output: {a['mem_insts_over_1_5']} (goal 0)",
            f"over 1.25x XLA's registers: {a['registers_over_1_25']} = {pct('registers_over_1_25')} (goal <= 5%)",
            f"launch (grid, block) equal: {a['launch_equal']}/{n}; with shared memory: {a['launch_shared_equal']}/{n} "
            f"= {pct('launch_shared_equal')} (goal >= 95%); differs for a reason given on the row "
            f"(--kernels): {a['launch_shared_explained']} (equal or explained: "
            f"{a['launch_shared_equal'] + a['launch_shared_explained']}/{n})",
            f"runtime loops where XLA's kernel has none: {a['loops_where_xla_has_none']}"]


def _w(d: dict) -> str:
    return ",".join(f"{k}:{v}" for k, v in sorted(d.items(), key=lambda kv: -int(kv[0]))) or "-"


def print_kernels(rows: list[dict]) -> None:
    print("\nper kernel, fusegen / XLA (widths: bytes:count of global loads and stores; mem/out: global memory "
          "instructions x threads / outputs; smem: static + dynamic bytes)")
    print(f"{'module':26} {'kernel':30} {'kind':13} {'regs':>9} {'spill':>7} {'smem':>13} {'tc':>7} "
          f"{'loads f | x':>24} {'stores f | x':>20} {'mem/out':>13} {'loops':>5} {'launch':>7}")
    for r in rows:
        mod = r["module"].replace(".h200_opt.hlo", "")[:26]
        if "ratios" not in r:
            print(f"{mod:26} {r['kernel'][:30]:30} {r['kind'][:13]:13} FAILED: {r.get('failure')}")
            continue
        f, x = r["fusegen"], r["xla"]
        launch = "=" if r["launch_shared_equal"] else ("smem" if r["launch_equal"] else "differs")
        print(f"{mod:26} {r['kernel'][:30]:30} {r['kind'][:13]:13} {f['registers']:>4}/{x['registers']:<4} "
              f"{f['spill_bytes']:>3}/{x['spill_bytes']:<3} {f['shared_bytes']:>6}/{x['shared_bytes']:<6} "
              f"{f['tensor_core_instructions']:>3}/{x['tensor_core_instructions']:<3} "
              f"{_w(f['global_loads']):>11} | {_w(x['global_loads']):<10} {_w(f['global_stores']):>9} | "
              f"{_w(x['global_stores']):<8} {f['mem_insts_per_output']:>6.2f}/{x['mem_insts_per_output']:<6.2f} "
              f"{int(f['has_loop'])}/{int(x['has_loop'])} {launch:>7}")
        if "shared_difference" in r:
            print(f"{'':26} smem differs: {r['shared_difference']}")
        if "launch_difference" in r:
            print(f"{'':26} launch differs: {r['launch_difference']}")


def print_summary(res: dict, markdown: bool = False) -> None:
    s = res["summary"]
    lines = [kind_cells(k, c) for k, c in s["kinds"].items()] + [kind_cells("all", s["all"])]
    if markdown:
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS))
        for cells in lines:
            print("| " + " | ".join(cells) + " |")
    else:
        widths = [max(len(c), *(len(ln[i]) for ln in lines)) for i, c in enumerate(COLUMNS)]
        print("\n" + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(COLUMNS, widths))))
        for cells in lines:
            print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))))
    print()
    for line in headline(s):
        print(("- " if markdown else "  ") + line)
    fails = [r for r in res["rows"] if "ratios" not in r]
    if fails:
        print(f"\nfailed or unpaired launches ({len(fails)}), counted against fusegen:")
        for r in fails:
            print(f"  {r['module']} {r['fusion']} ({r['kernel']}): {r.get('failure')}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launch-dir", type=Path, default=LAUNCH, help="a launch corpus (LAUNCH.tsv, HLO, XLA's PTX)")
    ap.add_argument("--module", default="", help="only programs whose file name contains this")
    ap.add_argument("--limit", type=int, default=None, help="at most this many launches")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="parallel compiles")
    ap.add_argument("--kernels", action="store_true", help="also print one line per kernel")
    ap.add_argument("--markdown", action="store_true", help="print the summary as a markdown table")
    ap.add_argument("--json", action="store_true", help="print rows and summary as JSON (progress goes to stderr)")
    ap.add_argument("--cache-dir", default="", help="SASS cache directory (default: fusegen.codegen.sass's)")
    ap.add_argument("--no-cache", action="store_true", help="compile everything, cache nothing")
    a = ap.parse_args(argv)
    if not (a.launch_dir / "LAUNCH.tsv").exists():
        print(f"ptx_vs_xla: no LAUNCH.tsv in {a.launch_dir}: nothing to compare", file=sys.stderr)
        return 2
    from fusegen.codegen import sass

    if (why := sass.tools_unavailable_reason()) is not None:
        print(f"ptx_vs_xla: {why}", file=sys.stderr)
        return 2
    log = (lambda *x: print(*x, file=sys.stderr, flush=True)) if a.json else (lambda *x: print(*x, flush=True))
    res = compare(a.launch_dir, a.module, a.limit, a.jobs, None if a.no_cache else a.cache_dir, log)
    if a.json:
        print(json.dumps(res, indent=1, default=str))
        return 0
    if a.kernels:
        print_kernels(res["rows"])
    print_summary(res, a.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
