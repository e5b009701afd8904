"""``[verify]``: how ``fusegen run`` judges kernel outputs (issue 9).

Two tolerances, both configurable (``[verify]`` in ``fusegen.toml``, ``--rtol`` / ``--atol`` on the command line):

* ``rtol``: the *conditioning factor*. A module output whose kernel-path value is no further from the f64
  oracle than ``rtol`` times the reference's own distance to it (plus the floor) is as accurate as the
  program's element types allow: ``drift``, not ``mismatch``. Default 4: kernels reassociate sums and use
  other transcendental approximations, so their rounding error is the reference's up to a small factor.
* ``atol``: the per-dtype *floor*, a fraction of the output's largest magnitude (``max(1, max|oracle|)``) that
  is always allowed, about a few units in the last place of the type: f64 1e-12, f32 1e-5, tf32 (the
  products of an f32 dot on tensor cores, each operand rounded to 10 mantissa bits) 1e-3, f16 1e-3, bf16 1e-2, f8 0.07. ``--atol X`` (or ``atol = X``) sets every type's floor; ``[verify.atol]`` sets them per
  type (``bf16 = 2e-2``).

One switch for ``--expected`` (:mod:`fusegen.verify.expected`): ``xla_allow_excess_precision`` (default true, as
XLA's flag of that name) says the expected answer may come from a pipeline that rounds a bf16/f16 intermediate
this HLO no longer has (XLA:GPU drops convert pairs under that flag; XLA:CPU may keep them). False (the expected
answer was computed with ``--xla_allow_excess_precision=false``) judges without that allowance.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

#: Per-dtype floors (fractions of max(1, max|value|)); one ulp-ish of each type, times a few.
DEFAULT_FLOORS: dict[str, float] = {"f64": 1e-12, "c128": 1e-12, "f32": 1e-5, "c64": 1e-5, "tf32": 1e-3,
                                    "f16": 1e-3, "bf16": 1e-2, "f8": 0.07}
DEFAULT_RTOL = 4.0
KEYS = ("rtol", "atol", "allow_vacuous", "xla_allow_excess_precision")


@attrs.frozen
class VerifyOptions:
    """Tolerances of the verdict.

    Attributes:
        rtol: conditioning factor (dimensionless, > 0): kernel error vs the f64 oracle may be ``rtol`` x the
            reference's own error.
        floors: element type -> floor (fraction of ``max(1, max|oracle|)``); f8/f4 types use key ``"f8"``.
        allow_vacuous: an output that is NaN/inf in every element in kernel and reference alike compares
            nothing; by default it is ``vacuous`` (not a pass: ``ok`` is false, exit 1); ``True`` (the user
            expects such outputs) makes it ``drift``.
        xla_allow_excess_precision: with ``--expected``, an element the expected answer misses by no more than
            one bf16 rounding of an intermediate, where the kernel is the nearer to the f64 oracle, is ``drift``
            (:func:`fusegen.verify.expected.rounded_more`); False judges it against the plain allowance.
    """

    rtol: float = DEFAULT_RTOL
    floors: Mapping[str, float] = attrs.field(factory=lambda: dict(DEFAULT_FLOORS))
    allow_vacuous: bool = False
    xla_allow_excess_precision: bool = True

    def floor(self, element_type: str) -> float:
        """The floor of ``element_type`` (0 for integer and pred types, compared exactly)."""
        if element_type.startswith(("f8", "f4")):
            return self.floors.get(element_type, self.floors.get("f8", DEFAULT_FLOORS["f8"]))
        return self.floors.get(element_type, 0.0)

    def with_floor_of(self, element_type: str, precision_type: str) -> "VerifyOptions":
        """A copy whose floor for ``element_type`` is at least ``precision_type``'s (an f32 output computed by
        a tf32 dot is judged with tf32's floor); ``self`` when that changes nothing."""
        f = max(self.floor(element_type), self.floor(precision_type))
        if precision_type == element_type or f == self.floor(element_type):
            return self
        return attrs.evolve(self, floors={**self.floors, element_type: f})

    def with_overrides(self, rtol: float | None = None, atol: float | None = None,
                       allow_vacuous: bool | None = None) -> "VerifyOptions":
        """A copy with ``--rtol``, ``--atol`` and/or ``--allow-vacuous`` applied (``atol`` replaces every type's
        floor); ``None`` keeps the current value."""
        floors = {k: atol for k in self.floors} if atol is not None else dict(self.floors)
        return attrs.evolve(self, rtol=self.rtol if rtol is None else rtol, floors=floors,
                            allow_vacuous=self.allow_vacuous if allow_vacuous is None else bool(allow_vacuous))


def parse_verify_table(table: Mapping[str, Any], error) -> tuple[VerifyOptions, dict[str, Any]]:
    """Read a ``[verify]`` table.

    Args:
        table: the parsed TOML table.
        error: ``error(message, *key_path)`` -> Exception to raise (names the file and line).

    Returns:
        ``(options, {dotted key: value})`` for the keys the file set.
    """
    rtol, floors, seen, flags = DEFAULT_RTOL, dict(DEFAULT_FLOORS), {}, {}
    for key, value in table.items():
        if key in ("allow_vacuous", "xla_allow_excess_precision"):
            if not isinstance(value, bool):
                raise error(f"{key!r} in [verify]: expected true or false, got {value!r}", "verify", key)
            flags[key] = value
            seen[f"verify.{key}"] = value
        elif key == "rtol":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise error(f"'rtol' in [verify]: expected a positive number, got {value!r}", "verify", key)
            rtol = float(value)
            seen["verify.rtol"] = rtol
        elif key == "atol":
            if isinstance(value, dict):
                for t, v in value.items():
                    if t not in DEFAULT_FLOORS:
                        raise error(f"unknown element type {t!r} in [verify.atol]; known: "
                                    f"{', '.join(DEFAULT_FLOORS)}", "verify", key, t)
                    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                        raise error(f"{t!r} in [verify.atol]: expected a number >= 0, got {v!r}", "verify", key, t)
                    floors[t] = float(v)
                    seen[f"verify.atol.{t}"] = float(v)
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                floors = {k: float(value) for k in floors}
                seen["verify.atol"] = float(value)
            else:
                raise error(f"'atol' in [verify]: expected a number >= 0 or a table of them, got {value!r}",
                            "verify", key)
        else:
            import difflib

            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else " (did you mean 'rtol' or 'atol'?)"
            raise error(f"unknown key {key!r} in [verify]{hint}; known keys: {', '.join(KEYS)}", "verify", key)
    return VerifyOptions(rtol=rtol, floors=floors, **flags), seen
