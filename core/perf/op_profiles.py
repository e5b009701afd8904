"""Clock cycles per element of elementwise HLO ops, per GPU architecture: the flops the model charges them.

The numbers are XLA's measured op profiles (``xla/service/gpu/model/hlo_op_profiles_data.h``, produced by
``hlo_op_profiler_run``) for ``sm_90`` (H100) and ``sm_86`` (XLA's default profile, used for every other
architecture, e.g. the ``sm_89`` RTX A6000 test device). ``GpuHloCostAnalysis`` reads them through
``FlopsPerElement`` (``gpu_hlo_cost_analysis.cc``): an ``(opcode, element type)`` not listed costs
:data:`DEFAULT_FLOPS_PER_ELEMENT`. Element types are fusegen's (``f32``, ``s8``...); the type is the
instruction's result type, as XLA's lookup uses.
"""

from __future__ import annotations

#: ``kDefaultFlopsPerElement`` (gpu_hlo_cost_analysis.cc): an elementwise op not in the profile.
DEFAULT_FLOPS_PER_ELEMENT = 3

#: The profile used for an architecture without its own (XLA: ``all_profiles->at("sm_86")``).
DEFAULT_PROFILE = "sm_86"


def _table(rows: dict[str, dict[str, int]]) -> dict[tuple[str, str], int]:
    return {(op, ty): cycles for ty, ops in rows.items() for op, cycles in ops.items()}


_SM90 = {
    "s8": {"divide": 356, "multiply": 7, "power": 122},
    "s16": {"divide": 364, "multiply": 7, "power": 122},
    "s32": {"divide": 297, "multiply": 3, "power": 71},
    "s64": {"divide": 685, "multiply": 11, "power": 253},
    "u8": {"divide": 300, "multiply": 7, "power": 122},
    "u16": {"divide": 304, "multiply": 7, "power": 126},
    "u32": {"divide": 122, "multiply": 3, "power": 71},
    "u64": {"divide": 629, "multiply": 11, "power": 253},
    "f16": {"cbrt": 201, "cosine": 997, "exponential": 102, "exponential-minus-one": 217, "log": 182,
            "log-plus-one": 245, "rsqrt": 95, "sine": 993, "sqrt": 95, "tanh": 502, "add": 7, "atan2": 451,
            "divide": 43, "multiply": 7, "power": 526, "subtract": 7},
    "f32": {"cbrt": 178, "cosine": 978, "exponential": 79, "exponential-minus-one": 190, "log": 166,
            "log-plus-one": 229, "rsqrt": 75, "sine": 958, "sqrt": 75, "tanh": 467, "add": 7, "atan2": 431,
            "divide": 19, "multiply": 3, "power": 510, "subtract": 7},
    "f64": {"cbrt": 586, "cosine": 558, "exponential": 376, "exponential-minus-one": 712, "log": 815,
            "log-plus-one": 1259, "rsqrt": 277, "sine": 554, "sqrt": 332, "tanh": 431, "add": 15, "atan2": 930,
            "divide": 526, "multiply": 15, "power": 2205, "subtract": 15},
    "c64": {"cosine": 2415, "exponential": 641, "exponential-minus-one": 2055, "log": 756, "log-plus-one": 633,
            "rsqrt": 3148, "sine": 2324, "sqrt": 4344, "tanh": 2379, "add": 7, "atan2": 6462, "divide": 498,
            "multiply": 79, "power": 5532, "subtract": 7},
    "c128": {"cosine": 1750, "exponential": 1342, "exponential-minus-one": 1275, "log": 2455, "log-plus-one": 2403,
             "rsqrt": 5500, "sine": 1999, "sqrt": 6636, "tanh": 4613, "add": 15, "atan2": 13131, "divide": 2280,
             "multiply": 39, "power": 8363, "subtract": 15},
}

_SM86 = {
    "s8": {"divide": 370, "power": 392},
    "s16": {"divide": 367, "power": 396},
    "s32": {"divide": 306},
    "s64": {"divide": 918, "power": 601},
    "u8": {"divide": 306, "power": 388},
    "u16": {"divide": 302, "power": 399},
    "u32": {"divide": 115},
    "u64": {"divide": 838, "power": 604},
    "f16": {"cbrt": 925, "cosine": 691, "exponential": 108, "exponential-minus-one": 396, "log": 266,
            "log-plus-one": 284, "logistic": 226, "rsqrt": 97, "sqrt": 97, "tanh": 212, "atan2": 482, "power": 975},
    "f32": {"cbrt": 867, "cosine": 662, "exponential": 86, "exponential-minus-one": 381, "log": 244,
            "log-plus-one": 262, "logistic": 176, "rsqrt": 75, "sine": 662, "sqrt": 75, "tanh": 190, "atan2": 486,
            "power": 925},
    "f64": {"cbrt": 6339, "cosine": 1717, "exponential": 1652, "exponential-minus-one": 1900, "log": 608,
            "log-plus-one": 2073, "logistic": 2412, "rsqrt": 698, "sine": 1789, "sqrt": 986, "tanh": 1609, "add": 97,
            "atan2": 3747, "divide": 2016, "multiply": 97, "power": 5511, "subtract": 97},
    "c64": {"exponential": 1360, "exponential-minus-one": 1400, "log": 950, "log-plus-one": 842, "rsqrt": 2383,
            "sqrt": 3193, "atan2": 5353, "divide": 687, "power": 3351},
    "c128": {"cosine": 6613, "exponential": 4028, "exponential-minus-one": 4161, "log": 7599, "log-plus-one": 6962,
             "rsqrt": 11318, "sine": 5878, "sqrt": 15606, "tanh": 9939, "add": 97, "atan2": 39027, "divide": 7941,
             "multiply": 270, "power": 18205, "subtract": 97},
}

#: architecture (``sm_90``) -> ``(opcode, element type)`` -> clock cycles (= flops) per element.
PROFILES: dict[str, dict[tuple[str, str], int]] = {"sm_90": _table(_SM90), "sm_86": _table(_SM86)}


def profile_key(compute_capability: tuple[int, int]) -> str:
    """``sm_<major><minor>`` of a CUDA compute capability (XLA's profile key)."""
    return f"sm_{compute_capability[0]}{compute_capability[1]}"


def flops_per_element(compute_capability: tuple[int, int], opcode: str, element_type: str) -> int:
    """Flops XLA charges one element of elementwise ``opcode`` with result ``element_type``.

    Mirrors ``FlopsPerElement`` (gpu_hlo_cost_analysis.cc): the architecture's profile, else ``sm_86``'s;
    an op the profile lacks costs :data:`DEFAULT_FLOPS_PER_ELEMENT`.
    """
    table = PROFILES.get(profile_key(compute_capability), PROFILES[DEFAULT_PROFILE])
    return table.get((opcode, element_type), DEFAULT_FLOPS_PER_ELEMENT)
