"""Elemental emission of a fused computation as Triton expressions, through indexing maps.

Mirrors XLA's ``elemental_hlo_to_mlir.cc`` (``ProvideParameter`` / ``EmitElementalHloInstruction``) and
the indexing maps of ``indexing_analysis.cc``: to produce one element of an instruction at an index
(one Triton ``[BLOCK]`` int tensor per logical dimension) the generator maps the index to its operands'
indices and recurses; parameters are loaded at their physical offset ``sum(idx[d] * stride[d])``.

Every value is a ``[BLOCK]`` tensor variable of the instruction's element type. A value read at the same
indices is computed once (cache keyed by ``(instruction, index tuple)``), which is the partitioner's point
in XLA: no exponential recomputation when an instruction has several users. Index tuples are canonical
(variables are themselves de-duplicated by expression, and linear-index round trips such as
``bitcast(bitcast(x))`` are recognised), so equal indices hit the cache.

Invariant: no load leaves its buffer. Every index the generator produces lies inside its shape (tail lanes
are clamped by the caller; dynamic-update-slice/gather and computed pad/concatenate/window operands clamp
their operand indices and select), except where only a masked load reads it: a pad point or window position
in the padding of a parameter read through index maps masks that load by its in-domain test
(:mod:`~fusegen.codegen.elemental.reads`), and a concatenate of parameters dereferences only the selected
operand's pointer.

Contiguous vectors XLA's vectoriser would merge are read as one ``[block, V]`` load split into columns in
registers (:mod:`~fusegen.codegen.elemental.vector_reads`): reduce-window walks along a minor dimension, a
scatter's index vector, and the neighbours of a strided slice.

Numerics follow XLA:GPU: f16/bf16/fp8 arithmetic is done in f32 and rounded back; transcendental functions
call libdevice; integer division by zero gives -1 (all ones), ``INT_MIN / -1`` gives ``INT_MIN``;
float->int conversion saturates and maps NaN to 0; shifts by >= bit width give 0 (or the sign fill);
``maximum``/``minimum`` propagate NaN; integer ``power`` is exponentiation by squaring (negative exponents
give 1 for base 1, ±1 for base -1 by the exponent's parity, and 0 otherwise); start indices wider than the index type saturate before they are narrowed.
``reduce`` and ``reduce-window`` are runtime loops over the reduced elements / window positions (f16/bf16
add/multiply reducers accumulate in f32 and round once, as the reference evaluator does), except a short
window along a parameter's minor dimension, which is unrolled over vectors.

Tuple-shaped fusion parameters are read leaf by leaf (one kernel buffer per leaf, parameter kind
``"operand_leaf"``) through their ``get-tuple-element`` users.

Emitters that compute part of a fusion themselves (a hero) hand its values to the generator with
:meth:`ElementalGenerator.bind_value`, and emit on another block shape (a reduction's epilogue, scalar
combine functions) with :meth:`KernelContext.block`.

Anything else raises :class:`~fusegen.codegen.emitter.EmitterUnsupported` naming the op and instruction.
"""

from fusegen.codegen.elemental.common import (COMPLEX_PARTS, ELEMENTWISE, Cx, Index, choose_index_dtype,
                                              deep_recursion, int_list, is_float, parse_constant)
from fusegen.codegen.elemental.context import KernelContext
from fusegen.codegen.elemental.generator import ElementalGenerator

__all__ = ["COMPLEX_PARTS", "ELEMENTWISE", "Cx", "ElementalGenerator", "Index", "KernelContext",
           "choose_index_dtype", "deep_recursion", "int_list", "is_float", "parse_constant"]
