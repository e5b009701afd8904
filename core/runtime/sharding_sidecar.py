"""Output shardings stored beside an SPMD module: ``NAME.shardings.json``, written by ``fusegen capture``.

XLA's optimized per-partition module keeps the parameters' ``sharding={...}`` but usually drops the root's,
so a run from global arrays cannot tell how the devices' output shards make the global outputs. jax knows
(``compiled.output_shardings``); :func:`fusegen.capture` writes them beside the module it captured, and a
multi-device run reads them before it runs (:func:`stated_shardings`). The file, for a module
``NAME_opt.hlo`` (or ``NAME.hlo``), is ``NAME.shardings.json``::

    {"format": "fusegen.output_shardings/1", "module": "jit_step", "num_partitions": 8,
     "outputs": [{"sharding": "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}",
                  "shape": [16, 32], "dtype": "float32"}, ...]}

one entry per output leaf (the root tuple flattened, as ``o0``, ``o1`` ... of ``--expected``): the leaf's
HloSharding as XLA prints it (device ids are partition ids: positions in the mesh's device order), its global
shape and dtype (numpy's name); other keys are ignored. It is checked on read against the
module: its name, ``num_partitions``, the number of leaves, each sharding's form, and that each sharding cuts
the global shape into the module's per-partition shape (the entry computation layout's result); anything
else is an :class:`~fusegen.runtime.inputs.InputError` naming the file (and the leaf). No XLA counterpart:
XLA keeps the output shardings in ``HloModuleConfig`` (``spmd_output_sharding``), which its text omits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import attrs

from fusegen.hlo.ir import Module
from fusegen.hlo.sharding import Sharding, ShardingError, device_counts, parse_sharding
from fusegen.runtime.inputs import InputError

__all__ = ["FORMAT", "StatedShardings", "sidecar_path", "write_sidecar", "read_sidecar", "stated_shardings",
           "hlo_sharding_texts"]

FORMAT = "fusegen.output_shardings/1"


@attrs.frozen
class StatedShardings:
    """The output shardings a capture stated: one :class:`Sharding` and global shape per output leaf.

    Attributes:
        where: the file they were read from (or ``fusegen.capture of NAME`` for a capture in memory).
        shardings: per leaf, its sharding.
        global_shapes: per leaf, its global dims.
    """

    where: str
    shardings: tuple
    global_shapes: tuple


def sidecar_path(module_path: str | Path) -> Path:
    """``NAME.shardings.json`` beside ``NAME_opt.hlo`` / ``NAME.hlo`` (any other name: the name plus the suffix)."""
    p = Path(module_path)
    name = p.name
    for tail in ("_opt.hlo", ".hlo"):
        if name.endswith(tail):
            return p.with_name(name[: -len(tail)] + ".shardings.json")
    return p.with_name(name + ".shardings.json")


def hlo_sharding_texts(shardings: Sequence[Any], ranks: Sequence[int]) -> tuple[str, ...] | None:
    """jax's output shardings (``compiled.output_shardings`` flattened: ``NamedSharding``, ``GSPMDSharding`` ...)
    as HloSharding text (``NamedSharding._to_xla_hlo_sharding(rank)``); None when one has no such form."""
    out = []
    for s, rank in zip(shardings, ranks):
        to_hlo = getattr(s, "_to_xla_hlo_sharding", None)
        if to_hlo is None:
            return None
        try:
            out.append(str(to_hlo(rank)))
        except Exception:  # a sharding jax cannot spell as an HloSharding: no sidecar rather than a wrong one
            return None
    return tuple(out)


def write_sidecar(path: str | Path, module: Module, texts: Sequence[str], structs: Sequence[Any]) -> Path:
    """Write ``path`` (see the module docstring): ``texts`` one HloSharding per output leaf, ``structs`` each
    leaf's global shape and dtype (anything with ``.shape`` / ``.dtype``).

    Raises:
        OSError: the file cannot be written.
    """
    import numpy as np

    p, _ = device_counts(module)
    outputs = [{"sharding": t, "shape": [int(d) for d in s.shape], "dtype": np.dtype(s.dtype).name}
               for t, s in zip(texts, structs)]
    head = json.dumps({"format": FORMAT, "module": module.name, "num_partitions": p})[:-1]
    path = Path(path)  # one line per output leaf, so that a diff shows which one changed
    path.write_text(head + ', "outputs": [\n' + ",\n".join(f"  {json.dumps(o)}" for o in outputs) + "\n]}\n")
    return path


def _check(where: str, module: Module, texts: list, shapes: list, dtypes: list | None) -> StatedShardings:
    """The stated shardings, each checked against the module's per-partition output leaf."""
    import numpy as np

    from fusegen.hlo.dtypes import numpy_dtype

    leaves = module.entry.root.shape.leaves()
    if len(texts) != len(leaves):
        raise InputError(f"{where}: {len(texts)} output shardings for module {module.name}'s {len(leaves)} output "
                         "leaves")
    out = []
    for k, (t, g, leaf) in enumerate(zip(texts, shapes, leaves)):
        local = tuple(leaf.dimensions)
        try:
            s = parse_sharding(str(t))
            if s.kind == "tuple":
                raise ShardingError(f"tuple sharding {t} for an array leaf")
            got = s.local_shape(g)
        except ShardingError as e:
            raise InputError(f"{where}: output o{k}: {e}") from None
        if got != local:
            raise InputError(f"{where}: output o{k}: sharding {t} cuts the global shape {list(g)} into "
                             f"{list(got)}, the module's per-partition o{k} is {list(local)} (a file for another "
                             "module?)")
        if dtypes is not None and dtypes[k] != np.dtype(numpy_dtype(leaf.element_type)).name:
            raise InputError(f"{where}: output o{k} is {dtypes[k]}, the module's o{k} {leaf.element_type}")
        out.append(s)
    return StatedShardings(where, tuple(out), tuple(tuple(g) for g in shapes))


def read_sidecar(path: str | Path, module: Module) -> StatedShardings:
    """The output shardings of ``path``, checked against ``module`` (see the module docstring).

    Raises:
        InputError: an unreadable file, another format, module or partition count, a missing field, a sharding
            that does not parse or does not cut the global shape into the module's output (names the file).
    """
    path = Path(path)
    where = str(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise InputError(f"{where}: cannot read output shardings: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{where}: not a JSON file of output shardings ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise InputError(f"{where}: format {got!r}, expected {FORMAT!r}")
    if doc.get("module") != module.name:
        raise InputError(f"{where}: written for module {doc.get('module')!r}, not {module.name!r}")
    p, _ = device_counts(module)
    if doc.get("num_partitions") != p:
        raise InputError(f"{where}: num_partitions={doc.get('num_partitions')!r}, the module has {p}")
    outputs = doc.get("outputs")
    if not isinstance(outputs, list):
        raise InputError(f"{where}: no 'outputs' list")
    texts, shapes, dts = [], [], []
    for k, o in enumerate(outputs):
        ok = isinstance(o, dict) and isinstance(o.get("sharding"), str) and isinstance(o.get("shape"), list) \
            and all(isinstance(d, int) and d >= 0 for d in o["shape"]) and isinstance(o.get("dtype"), str)
        if not ok:
            raise InputError(f"{where}: output o{k} needs 'sharding' (text), 'shape' (a list of sizes) and 'dtype'")
        texts.append(o["sharding"])
        shapes.append(tuple(o["shape"]))
        dts.append(o["dtype"])
    return _check(where, module, texts, shapes, dts)


def stated_shardings(module: Module, texts: Sequence[str] | None = None, shapes: Sequence[Sequence[int]] = (),
                     where: str = "") -> StatedShardings | None:
    """The output shardings stated for ``module``: ``texts`` / ``shapes`` given (a capture in memory, ``where``
    naming it), else the sidecar beside ``module.filename`` when there is one, else None.

    Raises:
        InputError: see :func:`read_sidecar` (and the same checks for given texts).
    """
    if texts is not None:
        return _check(where or f"output shardings of {module.name}", module, list(texts),
                      [tuple(s) for s in shapes], None)
    if not module.filename or module.filename.startswith("<"):
        return None
    path = sidecar_path(module.filename)
    return read_sidecar(path, module) if path.is_file() else None
