"""What an emitter produces: kernel sources, their parameters and launch dimensions.

Mirrors XLA's ``LaunchDimensions`` (``xla/service/gpu/launch_dimensions.h``) and the kernel
arguments of ``KernelThunk``: every buffer argument is a 1-D array in *physical* order
(:mod:`fusegen.hlo.layout_util`).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from fusegen.pow2 import next_pow2
from fusegen.hlo.ir import Shape


@attrs.frozen
class LaunchDimensions:
    """Grid and block shape of one kernel launch.

    Attributes:
        grid: program (block) counts per grid axis, at most 3 axes; the kernel is launched with this grid.
        num_warps: warps per program (the Triton kernel's ``num_warps``).
        shared_memory_bytes: estimated static shared memory per program, bytes.
        threads: threads per block ``(x, y, z)`` of the launch this kernel stands for, when the emitter
            follows XLA's geometry (``None``: ``32 * num_warps``). XLA launches as many threads as its
            emitter needs (e.g. 100, 192), the Triton kernel the next power-of-two number of warps.
        launch_shared_memory_bytes: the launch's dynamic shared memory, bytes (XLA's thunk
            ``shared_memory``: 0 for native emitters, whose shared tiles are static; for a Triton fusion the
            compiled kernel's shared memory, set once the sm_90 compile is known:
            :func:`fusegen.runtime.compile_jobs.apply_compiled_shared`).
    """

    grid: tuple[int, ...]
    num_warps: int = 4
    shared_memory_bytes: int = 0
    threads: tuple[int, int, int] | None = None
    launch_shared_memory_bytes: int = 0

    @property
    def num_programs(self) -> int:
        n = 1
        for g in self.grid:
            n *= g
        return n

    @property
    def grid3(self) -> tuple[int, int, int]:
        """``grid`` padded to 3 axes (XLA's ``BlockDim``)."""
        g = tuple(self.grid) + (1, 1, 1)
        return (g[0], g[1], g[2])

    @property
    def threads3(self) -> tuple[int, int, int]:
        """Threads per block ``(x, y, z)`` (XLA's ``ThreadDim``)."""
        return tuple(self.threads) if self.threads is not None else (32 * self.num_warps, 1, 1)

    def to_json(self) -> dict:
        """``{"grid": [x, y, z], "threads": [x, y, z], "shared_memory_bytes": N}`` as XLA's thunk prints it."""
        return {"grid": list(self.grid3), "threads": list(self.threads3),
                "shared_memory_bytes": int(self.launch_shared_memory_bytes)}

    def __str__(self) -> str:
        smem = f" smem={self.shared_memory_bytes}B" if self.shared_memory_bytes else ""
        return f"grid={'x'.join(map(str, self.grid))} warps={self.num_warps}{smem}"


@attrs.frozen
class KernelParam:
    """One kernel argument.

    Attributes:
        kind: ``"operand"`` (fusion operand ``index``), ``"output"`` (output leaf ``index``),
            ``"constant"`` (``value``, a logical numpy array laid out by ``shape``) or ``"scratch"`` (a
            zero-initialised buffer of ``shape`` shared, by ``index``, by every kernel of the fusion).
        index: operand / output-leaf number.
        shape: the buffer's HLO shape (element type and layout decide the physical buffer).
        value: the constant's logical array (``kind == "constant"`` only).
    """

    kind: str
    index: int
    shape: Shape
    value: Any = attrs.field(default=None, eq=False)


@attrs.frozen
class KernelSource:
    """A generated Triton kernel.

    Attributes:
        name: sanitized kernel name (a valid Python identifier).
        source: complete Python module text defining ``@triton.jit`` function ``entry``.
        entry: the kernel function's name in ``source``.
        params: pointer arguments, in signature order, followed by nothing else; sizes are constexprs.
        constexprs: ``tl.constexpr`` arguments by name (block sizes...), passed after the pointers.
        launch: launch dimensions.
        num_stages: software pipelining stages for compilation.
        interpret_variant: an equivalent kernel (same params, same results) with larger tiles, run
            instead of this one in Triton's interpreter, where the cost is per program and per tile
            rather than per element; compiled and reported launches always use this kernel, and every run also
            runs some of this kernel's own programs against the variant's results
            (:mod:`fusegen.runtime.compiled_program`).
        scalar_types: Triton types (``"i32"``...) of runtime scalar arguments, passed after the pointers
            and before the constexprs (one compiled kernel serves every value).
        scalar_launches: the kernel is launched once per entry, in order, with that entry's scalar
            arguments, over the same buffers (each launch sees the previous launches' writes: XLA's
            multi-launch sorts). Empty: one launch without scalars. The interpreter variant runs its own
            ``scalar_launches``: the same launches, or fewer doing the same steps in the same order
            (a variant whose programs hold whole rows). ``launch`` is every launch's grid. A variant may
            also do the launches of the kernels right after it (a merged interpreter launch, e.g. every
            global step of a sort stage over whole rows): their variants then launch no program (grid 0).
        notes: where the emitter knows its kernel is not XLA's program, why (one sentence each: e.g. a tile
            padded because upstream Triton has no smaller ``tl.dot``, so shared memory differs); reports and
            benchmark rows show them.
        max_registers: registers per thread ptxas may use (Triton's ``maxnreg``); 0: ptxas chooses (up to the
            block's limit). An emitter sets it where ptxas would otherwise spend registers the kernel's live
            values do not need (the occupancy XLA's kernel gets).
    """

    name: str
    source: str
    entry: str
    params: tuple[KernelParam, ...]
    constexprs: dict[str, int] = attrs.field(factory=dict)
    launch: LaunchDimensions = LaunchDimensions((1,))
    num_stages: int = 1
    interpret_variant: "KernelSource | None" = attrs.field(default=None, eq=False, repr=False)
    scalar_types: tuple[str, ...] = ()
    scalar_launches: tuple[tuple[int, ...], ...] = ()
    notes: tuple[str, ...] = attrs.field(default=(), eq=False)
    max_registers: int = 0

    @property
    def launch_args(self) -> tuple[tuple[int, ...], ...]:
        """Scalar arguments of each launch, in order (``((),)`` for a kernel launched once without scalars)."""
        return self.scalar_launches or ((),)


@attrs.frozen
class EmittedFusion:
    """An emitter's result for one fusion.

    Attributes:
        emitter: emitter class name (``LoopFusion``, ``MemcpyFusion``...).
        kernels: kernels launched in order (empty for memcpy).
        output_aliases: output leaf -> operand index whose buffer the output reuses in place
            (the output buffer starts as a copy of that operand, as with XLA's buffer aliasing).
        copies: ``(operand, output_leaf)`` device-to-device copies (memcpy fusions), done first.
        primary: index of the kernel that stands for the fusion's launch (XLA's kernel; the others are
            preparation kernels such as a scatter's operand initialisation).
    """

    emitter: str
    kernels: tuple[KernelSource, ...] = ()
    output_aliases: dict[int, int] = attrs.field(factory=dict)
    copies: tuple[tuple[int, int], ...] = ()
    primary: int = 0

    @property
    def launch(self) -> LaunchDimensions | None:
        if not self.kernels:
            return None
        return self.kernels[min(self.primary, len(self.kernels) - 1)].launch


def constant_buffer(value: np.ndarray, shape: Shape) -> np.ndarray:
    """Physical 1-D buffer of a constant."""
    from fusegen.hlo.layout_util import to_physical

    return to_physical(value, shape)


#: Lanes per program of an emitter's interpreter variant (:attr:`KernelSource.interpret_variant`): Triton's
#: interpreter pays per program and per op, numpy per element.
INTERPRET_TILE_LANES = 1 << 17


def interpret_tile_sizes(dims: tuple[int, ...] | list[int], sizes: list[int],
                         max_lanes: int = INTERPRET_TILE_LANES) -> list[int]:
    """Output tile sizes of an interpreter variant: ``sizes`` grown innermost dimension first (doubling, at most
    to the dimension) while the tile rounded up to powers of two stays within ``max_lanes`` lanes; ``sizes``
    (each at least 1) unchanged when it cannot grow. Emitters use it where a larger tile computes the same
    value per element (fusegen's own interpreter speed-up; XLA has no such variant).

    Example: ``dims (4, 128, 768)``, ``sizes [1, 1, 768]`` -> ``[1, 128, 768]`` (131072 lanes).
    """
    out = [max(1, s) for s in sizes]
    for d in reversed(range(len(dims))):
        while out[d] < dims[d]:
            cand = out[:d] + [min(dims[d], out[d] * 2)] + out[d + 1:]
            lanes = 1
            for c in cand:
                lanes *= next_pow2(c)
            if lanes > max_lanes:
                return out
            out = cand
    return out
