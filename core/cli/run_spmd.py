"""``fusegen run`` on a module of more than one device: every partition x replica, global arrays in and out.

The CLI side of :mod:`fusegen.runtime.spmd`: reads ``--inputs`` (a global ``.npz`` split by the parameters'
shardings, or a folder of ``part{K}.inputs.npz``; seeded shards without it) and ``--expected`` (global, or a
folder of ``part{K}.expected.npz``), runs all N copies and maps every refusal to one line: exit 4
(:data:`~fusegen.cli.common.EXIT_UNSUPPORTED`) for an instruction fusegen cannot run as N copies, exit 2 for
bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fusegen.cli.common import EXIT_UNSUPPORTED, fail, internal_error


def is_multi_device(module: Any) -> bool:
    """Whether ``num_partitions * replica_count > 1`` (exit 2 on an unreadable count)."""
    from fusegen.hlo.sharding import ShardingError, device_counts

    try:
        p, r = device_counts(module)
    except ShardingError as e:
        fail(f"{module.filename}: {e}")
    return p * r > 1


def run_partitioned(module: Any, module_path: str, inputs_path: str | None, expected_path: str | None, seed: int,
                    device: Any, limits: Any, verify: Any, compile_kernels: bool, on_fusion: Any,
                    jobs: int) -> tuple[Any, Any]:
    """``(global outputs, SpmdRunReport)`` of every device of ``module``; exits with one line on a refusal."""
    from fusegen.codegen.kernel_dir import KernelDirError
    from fusegen.dispatch import DispatchError
    from fusegen.evaluator.collectives import MultiDeviceUnsupported
    from fusegen.evaluator.common import EvaluationError
    from fusegen.evaluator.evaluator import UnsupportedOpError
    from fusegen.hlo.sharding import ShardingError
    from fusegen.plugin_manager import PluginError
    from fusegen.runtime.inputs import InputError
    from fusegen.runtime.limits import ResourceLimitError
    from fusegen.runtime.spmd import run_spmd_module
    from fusegen.runtime.spmd_io import load_expected_parts, load_spmd_inputs, seeded_inputs
    from fusegen.runtime.spmd_plan import plan_spmd
    from fusegen.verify.verdict import load_expected

    try:
        plan = plan_spmd(module)
    except MultiDeviceUnsupported as e:
        fail(f"{module_path}: cannot run as {module.attrs.get('num_partitions', 1)} partitions x "
             f"{module.attrs.get('replica_count', 1)} replicas: {e}", EXIT_UNSUPPORTED)
    try:
        args = load_spmd_inputs(module, plan, inputs_path) if inputs_path else seeded_inputs(module, plan, seed)
        expected = parts = None
        if expected_path:
            n = len(module.entry.root.shape.leaves())
            if Path(expected_path).is_dir():
                parts = load_expected_parts(module, plan, expected_path)
            else:
                expected = load_expected(expected_path, n)
    except (InputError, ValueError) as e:
        fail(str(e))
    except MemoryError as e:
        fail(f"{module_path}: the inputs of module {module.name} do not fit in memory ({e})")
    try:
        _, out, report = run_spmd_module(module, args, device, compile_kernels=compile_kernels, on_fusion=on_fusion,
                                         limits=limits, verify=verify, expected=expected, expected_parts=parts,
                                         jobs=jobs, plan=plan)
    except MultiDeviceUnsupported as e:
        fail(f"{module_path}: cannot run as all {plan.devices} devices: {e}", EXIT_UNSUPPORTED)
    except ShardingError as e:
        fail(f"{module_path}: outputs: {e}")
    except (UnsupportedOpError, PluginError, InputError, ResourceLimitError, KernelDirError) as e:
        fail(f"{module_path}: {e}")
    except DispatchError as e:
        fail(f"{module_path}: {e} (check [plugins] disable in the config)")
    except EvaluationError as e:
        fail(f"{module_path}: cannot evaluate: {e}")
    except MemoryError as e:
        fail(f"{module_path}: module {module.name} needs more memory than this machine has ({e})")
    except Exception as e:  # never a bare traceback
        internal_error(f"{module_path}: module {module.name} ({plan.devices} devices)", e)
    return out, report


def explain_devices(module: Any) -> tuple[dict, list[str]]:
    """``explain``'s part for a module's devices: ``({"num_partitions", "replica_count", "collectives": [...],
    "multi_device_refusal"?}, lines)``; the lines are empty for a module of one device without collectives."""
    from fusegen.evaluator.collectives import MultiDeviceUnsupported
    from fusegen.hlo.sharding import ShardingError, device_counts
    from fusegen.runtime.spmd_plan import plan_spmd

    try:
        p, r = device_counts(module)
    except ShardingError as e:
        fail(f"{module.filename}: {e}")
    doc: dict = {"num_partitions": p, "replica_count": r, "collectives": []}
    try:
        plan = plan_spmd(module)
    except MultiDeviceUnsupported as e:
        if p * r == 1:
            return doc, []
        doc["multi_device_refusal"] = str(e)
        return doc, [f"devices: num_partitions={p}, replica_count={r}; `run` refuses it (exit 4): {e}"]
    doc["collectives"] = [c.to_json() for c in plan.collectives.values()]
    if p * r == 1 and not plan.collectives:
        return doc, []
    lines = [f"devices: num_partitions={p}, replica_count={r}; {len(plan.collectives)} collective(s)"]
    for c in plan.collectives.values():
        lines.append(f"  %{c.name} {c.opcode} ({c.mode.replace('_', ' ')}) groups={[list(g) for g in c.groups]} "
                     f"channel_id={c.channel_id} moves {c.bytes_per_partition} B per partition"
                     + (f" pairs={[list(q) for q in c.pairs]}" if c.pairs else ""))
    return doc, lines
