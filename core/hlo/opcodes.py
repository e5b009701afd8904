"""HLO opcode spellings.

Mirrors the opcode table of ``xla/hlo/ir/hlo_opcode.h`` (``HLO_OPCODE_LIST``): the text spelling of every
opcode XLA's HLO parser accepts. Async wrappers print as ``<wrapped-opcode>-start`` / ``-update`` /
``-done`` (``xla/hlo/parser/hlo_parser.cc``, ``call-start``, ``custom-call-start``, ``fusion-start`` ...);
:func:`is_known_opcode` accepts those for any known opcode.
"""

from __future__ import annotations

_BASE = """
abs acos acosh add add-dependency after-all all-gather all-gather-done all-gather-start all-reduce
all-reduce-done all-reduce-start all-to-all and asin asinh async-done async-start async-update atan2 atanh
batch-norm-grad batch-norm-inference batch-norm-training bitcast bitcast-convert broadcast call cbrt ceil
cholesky clamp collective-broadcast collective-permute collective-permute-done collective-permute-start
compare complex concatenate conditional constant convert convolution copy copy-done copy-start cosh cosine
count-leading-zeros custom-call divide domain dot dynamic-reshape dynamic-slice dynamic-update-slice erf
exponential exponential-minus-one fft floor fusion gather get-dimension-size get-tuple-element imag infeed
iota is-finite log log-plus-one logistic map maximum minimum mulhi multiply negate not
opt-barrier or outfeed pad parameter partition-id popcnt power ragged-all-to-all ragged-dot real recv recv-done reduce
reduce-precision reduce-scatter reduce-window remainder replica-id reshape reverse rng rng-bit-generator
rng-get-and-update-state round-nearest-afz round-nearest-even rsqrt scaled-dot scan scatter select
select-and-scatter send send-done set-dimension-size shift-left shift-right-arithmetic shift-right-logical
sign sine sinh slice sort sqrt stochastic-convert subtract tan tanh topk transpose triangular-solve tuple
while xor
"""

#: Async-wrapper spellings seen in XLA text (``call-start`` wraps a ``call`` in an async computation).
_ASYNC_WRAPPERS = """
call-start call-update call-done custom-call-start custom-call-update custom-call-done fusion-start
fusion-update fusion-done reduce-scatter-start reduce-scatter-done all-to-all-start all-to-all-done
ragged-all-to-all-start ragged-all-to-all-done collective-broadcast-start collective-broadcast-done
"""

#: Every HLO opcode spelling XLA knows.
KNOWN_OPCODES: frozenset[str] = frozenset(_BASE.split()) | frozenset(_ASYNC_WRAPPERS.split())

_ASYNC_SUFFIXES = ("-start", "-update", "-done")


def is_known_opcode(opcode: str) -> bool:
    """Whether ``opcode`` is an HLO opcode spelling, including ``<op>-start/-update/-done`` async forms."""
    if opcode in KNOWN_OPCODES:
        return True
    for suffix in _ASYNC_SUFFIXES:
        if opcode.endswith(suffix) and opcode[: -len(suffix)] in KNOWN_OPCODES:
            return True
    return False


#: Elementwise opcodes whose result shape equals their first operand's (used to infer an omitted shape).
SAME_SHAPE_OPCODES: frozenset[str] = frozenset(
    """abs acos acosh add and asin asinh atan2 atanh cbrt ceil cosh cosine count-leading-zeros divide erf
    exponential exponential-minus-one floor imag log log-plus-one logistic maximum minimum mulhi multiply negate
    not or popcnt power real remainder round-nearest-afz round-nearest-even rsqrt select shift-left
    shift-right-arithmetic shift-right-logical sign sine sinh sqrt subtract tan tanh xor clamp copy""".split()
)
