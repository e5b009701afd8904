"""What dispatch and the emitters know about one fusion: roots, heroes, backend config.

Mirrors ``HloFusionAnalysis`` (``xla/service/gpu/hlo_fusion_analysis.cc``) together with the
parts of ``HloFusionAdaptor`` (``xla/hlo/utils/hlo_traversal.cc``) it relies on:

* ``FusionAnalysis.create(instruction)`` = ``HloFusionAnalysis::Create(instruction, device)``: a fusion
  is analysed through its fused computation; any other instruction as a one-instruction fusion.
* ``FusionAnalysis.create_producer_consumer(producer, consumer)`` = ``AnalyzeProducerConsumerFusion``:
  the producer fused into the consumer. fusegen builds the combined fused computation in memory
  (clones; the module is not touched); :meth:`FusionAnalysis.original` maps a clone back.

Roots are the fused root, a root ``tuple`` expanded into its operands (recursively); in a
producer-consumer fusion a consumer root that is the producer becomes the producer's root(s), and
roots of a multi-output producer that are used outside the consumer are added, as ``GetRoots`` does.
"""

from __future__ import annotations

import attrs

from fusegen import kinds
from fusegen.analysis.hero import find_non_trivial_hero
from fusegen.analysis.reduction import is_real_reduction_hero
from fusegen.analysis.transpose import TransposeDescription, find_consistent_transpose_hero
from fusegen.hlo.dtypes import bit_width
from fusegen.hlo.ir import Computation, Instruction, Module, Shape


class FusionAnalysisError(ValueError):
    """The instruction cannot be analysed (names the fusion and file/line)."""


@attrs.frozen
class InputOutputInfo:
    """``HloFusionAnalysis::InputOutputInfo``: smallest element widths of fusion inputs and outputs,
    in bits as ``SmallestBitWidth`` (``hlo_fusion_analysis.cc``) counts them: ``primitive_util::BitWidth``
    except ``pred``, which counts as its 8-bit storage (so a pred output forces no unroll of 8 in
    ``ComputeLoopFusionConfig``); :attr:`NO_BITS` when none."""

    smallest_input_dtype_bits: int
    smallest_output_dtype_bits: int
    NO_BITS = 2**31 - 1


def _xla_bits(element_type: str) -> int:
    # SmallestBitWidth: PRED counts 8 bits (its storage), not BitWidth(PRED) = 1.
    return 8 if element_type == "pred" else bit_width(element_type)


def _smallest_bits(insts: list[Instruction]) -> int:
    bits = InputOutputInfo.NO_BITS
    for i in insts:
        if i.shape.is_array:
            try:
                bits = min(bits, _xla_bits(i.shape.element_type))
            except ValueError:
                continue
    return bits


def _where(inst: Instruction) -> str:
    comp = inst.parent
    return f"%{inst.name} (line {inst.line}{', in %' + comp.name if comp is not None else ''})"


def _flatten_tuple_root(inst: Instruction) -> list[Instruction]:
    if inst.opcode == "tuple":
        out: list[Instruction] = []
        for o in inst.operands:
            out.extend(_flatten_tuple_root(o))
        return out
    return [inst]


class _Builder:
    """Clones instructions into a fresh computation, remembering where each clone came from."""

    def __init__(self, name: str):
        self.comp = Computation(name=name)
        self.origin: dict[int, Instruction] = {}
        self.n_params = 0

    def param(self, like: Instruction, name: str | None = None) -> Instruction:
        p = Instruction(
            name=name or f"param_{self.n_params}",
            opcode="parameter",
            shape=like.shape,
            attrs={"parameter_number": self.n_params},
            line=like.line,
        )
        self.n_params += 1
        self.comp.add(p)
        self.origin[id(p)] = like
        return p

    def clone(self, inst: Instruction, operands: list[Instruction]) -> Instruction:
        c = Instruction(name=inst.name, opcode=inst.opcode, shape=inst.shape, operands=operands, attrs=dict(inst.attrs), line=inst.line)
        self.comp.add(c)
        self.origin[id(c)] = inst
        return c


def _body(inst: Instruction) -> tuple[Computation | None, Instruction]:
    """The fused computation of a fusion, or ``None`` for a plain instruction."""
    if inst.opcode == "fusion":
        try:
            return inst.fused_computation, inst
        except ValueError as e:
            raise FusionAnalysisError(f"fusion {_where(inst)} has no fused computation") from e
    return None, inst


def _clone_body(b: _Builder, inst: Instruction, param_source) -> list[Instruction]:
    """Clone ``inst`` (its fused body, or itself) into ``b``; ``param_source(i, operand)`` gives the
    instruction that replaces parameter/operand ``i``. Returns the clone's roots (tuple expanded)."""
    body, _ = _body(inst)
    if body is None:
        seen: dict[int, Instruction] = {}
        ops = []
        for i, o in enumerate(inst.operands):
            if id(o) not in seen:
                seen[id(o)] = param_source(i, o)
            ops.append(seen[id(o)])
        return [b.clone(inst, ops)]
    mapping: dict[int, Instruction] = {}
    for i in body.post_order():
        if i.opcode == "parameter":
            n = i.parameter_number
            if n >= len(inst.operands):
                raise FusionAnalysisError(f"fusion {_where(inst)}: parameter({n}) has no operand")
            mapping[id(i)] = param_source(n, inst.operands[n])
        else:
            mapping[id(i)] = b.clone(i, [mapping[id(o)] for o in i.operands])
    root = body.root
    if root is None:
        raise FusionAnalysisError(f"fusion {_where(inst)}: fused computation %{body.name} has no root")
    return [mapping[id(r)] for r in _flatten_tuple_root(root)]


def _backend_config_of(inst: Instruction) -> tuple[bool, dict]:
    """``(present and parses, GpuBackendConfig as dict)``."""
    if "backend_config" not in inst.attrs:
        return False, {}
    bc = inst.attrs["backend_config"]
    if isinstance(bc, dict):
        return True, bc
    return False, {}


def _fusion_backend_config(bc: dict) -> dict:
    fbc = bc.get("fusion_backend_config")
    return fbc if isinstance(fbc, dict) else {}


class FusionAnalysis:
    """Roots, heroes and backend config of one (possibly producer-consumer) fusion.

    Attributes:
        name: the fusion's name (``"producer+consumer"`` for a producer-consumer analysis).
        fusion: the analysed fusion instruction (the consumer for producer-consumer; the instruction
            itself for a non-fusion instruction); ``None`` for a bare computation.
        producer, consumer: set for producer-consumer analyses.
        computation: the fused computation walked by the analysis (in-memory for producer-consumer
            and single instructions).
        device: the :class:`~fusegen.device.DeviceDescription`.
        roots: fusion roots (a root tuple expanded).
        heroes: one hero per root (``FindNonTrivialHero``); reset to the roots after a kLoop decision.
        non_trivial_heroes: the heroes as found, kept across a kLoop reset.
        backend_config: the ``fusion_backend_config`` dict (``{}`` when absent).
        gpu_backend_config: the whole backend config dict used.
        backend_kind: ``fusion_backend_config.kind`` stamp or ``None``.
        tiled_transpose: the consistent transpose hero description, or ``None``.
        input_output_info: smallest input/output bit widths.
        parameters: parameter instructions of :attr:`computation`.
        kind, decided_by: filled in by :func:`fusegen.dispatch.get_emitter_fusion_kind`.
    """

    def __init__(
        self,
        *,
        name: str,
        computation: Computation,
        roots: list[Instruction],
        device,
        gpu_backend_config: dict,
        fusion: Instruction | None = None,
        producer: Instruction | None = None,
        consumer: Instruction | None = None,
        origin: dict[int, Instruction] | None = None,
    ):
        if not roots:
            raise FusionAnalysisError(f"fusion {name!r}: no roots")
        self.name = name
        self.fusion = fusion
        self.producer = producer
        self.consumer = consumer
        self.computation = computation
        self.device = device
        self.roots = list(roots)
        self._origin = origin or {}
        self.gpu_backend_config = gpu_backend_config
        self.backend_config = _fusion_backend_config(gpu_backend_config)
        k = self.backend_config.get("kind")
        self.backend_kind: str | None = k if isinstance(k, str) and k else None
        self.parameters = [i for i in computation.instructions if i.opcode == "parameter"]
        self.input_output_info = InputOutputInfo(_smallest_bits(self.parameters), _smallest_bits(self.roots))
        if self.backend_kind == kinds.TRITON_COLLECTIVE_STAMP:
            hero = self._find_collective_hero()
            self.non_trivial_heroes = [hero] * len(self.roots) if hero is not None else list(self.roots)
        else:
            # shared by the roots' hero searches (the computation does not change here); a lone root shares nothing
            memo: dict | None = {} if len(self.roots) > 1 else None
            self.non_trivial_heroes = [find_non_trivial_hero(r, memo) for r in self.roots]
        self.heroes = list(self.non_trivial_heroes)
        self.tiled_transpose: TransposeDescription | None = find_consistent_transpose_hero(self.roots, self.heroes)
        self._tiled_transpose_found = self.tiled_transpose
        self.kind: str | None = None
        self.decided_by: str | None = None

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def create(cls, instruction: Instruction, device=None) -> "FusionAnalysis":
        """Analyse ``instruction``: a fusion through its fused computation, anything else as a
        one-instruction fusion (``HloFusionAnalysis::Create``).

        Args:
            instruction: the fusion (or other) instruction.
            device: a :class:`~fusegen.device.DeviceDescription`; default H200.

        Raises:
            FusionAnalysisError: a fusion without a fused computation/root.
        """
        from fusegen.device import DEFAULT_DEVICE

        device = device or DEFAULT_DEVICE
        ok, bc = _backend_config_of(instruction)
        body, _ = _body(instruction)
        if body is not None:
            if body.root is None:
                raise FusionAnalysisError(f"fusion {_where(instruction)}: fused computation %{body.name} has no root")
            roots = _flatten_tuple_root(body.root)
            return cls(name=instruction.name, computation=body, roots=roots, device=device,
                       gpu_backend_config=bc if ok else {}, fusion=instruction)
        b = _Builder(f"single.{instruction.name}")
        roots = _clone_body(b, instruction, lambda i, o: b.param(o, f"p{i}"))
        b.comp.root = roots[0]
        return cls(name=instruction.name, computation=b.comp, roots=roots, device=device,
                   gpu_backend_config=bc if ok else {}, fusion=instruction, origin=b.origin)

    @classmethod
    def create_producer_consumer(cls, producer: Instruction, consumer: Instruction, device=None) -> "FusionAnalysis":
        """Analyse ``producer`` fused into ``consumer`` (``HloFusionAnalysis::Create(producer,
        consumer, device)``).

        The backend config is the consumer's when it has one that parses, else the producer's.

        Raises:
            FusionAnalysisError: ``consumer`` does not use ``producer`` (directly or through a
                get-tuple-element), or a malformed fusion.
        """
        from fusegen.device import DEFAULT_DEVICE

        device = device or DEFAULT_DEVICE
        if not any(o is producer or (o.opcode == "get-tuple-element" and o.operands and o.operands[0] is producer) for o in consumer.operands):
            raise FusionAnalysisError(f"producer {_where(producer)} is not an operand of consumer {_where(consumer)}")
        b = _Builder(f"{producer.name}+{consumer.name}")
        producer_roots = _clone_body(b, producer, lambda i, o: b.param(o))

        def consumer_source(i: int, operand: Instruction) -> Instruction:
            if operand is producer:
                return producer_roots[0]
            if operand.opcode == "get-tuple-element" and operand.operands and operand.operands[0] is producer:
                idx = int(operand.attrs.get("index", 0))
                if idx < len(producer_roots):
                    return producer_roots[idx]
            return b.param(operand)

        roots = _clone_body(b, consumer, consumer_source)
        if producer.shape.is_tuple:
            # Producer roots used outside the consumer stay outputs (skip parameters, as XLA does).
            outside: set[int] = set()
            for u in producer.users:
                if u.opcode == "get-tuple-element":
                    if any(uu is not consumer for uu in u.users):
                        outside.add(int(u.attrs.get("index", 0)))
                elif u is not consumer:
                    outside.add(0)
            for i, r in enumerate(producer_roots):
                if i in outside and r.opcode != "parameter":
                    roots.append(r)
        if len(roots) == 1:
            b.comp.root = roots[0]
        else:
            shapes = tuple(r.shape for r in roots)
            t = Instruction(name="tuple.roots", opcode="tuple", shape=Shape("tuple", tuple_shapes=shapes), operands=list(roots))
            b.comp.add(t)
            b.comp.root = t
        ok_c, bc_c = _backend_config_of(consumer)
        ok_p, bc_p = _backend_config_of(producer)
        bc = bc_c if ok_c else (bc_p if ok_p else {})
        return cls(name=f"{producer.name}+{consumer.name}", computation=b.comp, roots=roots, device=device,
                   gpu_backend_config=bc, fusion=consumer, producer=producer, consumer=consumer, origin=b.origin)

    # -- queries ------------------------------------------------------------------------------

    def original(self, inst: Instruction) -> Instruction:
        """The module instruction a clone was made from (``inst`` itself when not a clone)."""
        return self._origin.get(id(inst), inst)

    def find_hero_reduction(self) -> Instruction | None:
        """``FindHeroReduction``: the hero of the first root that is a real reduction hero."""
        for root, hero in zip(self.roots, self.non_trivial_heroes):
            if is_real_reduction_hero(root, hero, self.device):
                return hero
        return None

    def use_concatenate_fusion(self) -> bool:
        """``UseConcatenateFusion``: one hero, a concatenate with at most 4 operands, root not a tuple."""
        return use_concatenate_fusion(self.roots, self.heroes)

    def reset_heroes_to_roots(self) -> None:
        """What ``Create`` does after a kLoop decision: heroes become the roots, no transpose."""
        self.heroes = list(self.roots)
        self.tiled_transpose = None

    def restore_heroes(self) -> None:
        """Undo :meth:`reset_heroes_to_roots` (before asking the matchers again)."""
        self.heroes = list(self.non_trivial_heroes)
        self.tiled_transpose = self._tiled_transpose_found

    def _find_collective_hero(self) -> Instruction | None:
        for i in self.computation.post_order():
            if i.opcode in ("all-gather", "all-reduce", "all-gather-start", "all-reduce-start"):
                return i
        return None

    def __repr__(self) -> str:
        return f"<FusionAnalysis {self.name}: {len(self.roots)} root(s), kind={self.kind}>"


def use_concatenate_fusion(roots: list[Instruction], heroes: list[Instruction]) -> bool:
    """``UseConcatenateFusion`` (hlo_fusion_analysis.cc): exactly one hero, a ``concatenate`` with
    ``<= 4`` operands, and the first root not tuple-shaped."""
    if len(heroes) != 1:
        return False
    h = heroes[0]
    if h.opcode != "concatenate":
        return False
    if roots[0].shape.is_tuple:
        return False
    return len(h.operands) <= 4


def entry_fusion(module: Module) -> Instruction:
    """The fusion an emitter lit test exercises (``LoadTestModule``, xla/codegen/tools/test_lib.cc).

    The entry root when it is a fusion, else the entry's last fusion; an entry without fusions is
    wrapped into a ``kLoop`` fusion in memory (parameters passed through).

    Raises:
        FusionAnalysisError: the module has no entry computation.
    """
    entry = module.entry
    if entry is None or entry.root is None:
        raise FusionAnalysisError(f"{module.filename}: module has no entry computation")
    if entry.root.opcode == "fusion":
        return entry.root
    fusions = [i for i in entry.instructions if i.opcode == "fusion"]
    if fusions:
        return fusions[-1]
    params = entry.parameters
    wrapper = Computation(name=f"{entry.name}.wrapper", is_entry=True)
    ps = [wrapper.add(Instruction(name=p.name, opcode="parameter", shape=p.shape, attrs={"parameter_number": p.parameter_number})) for p in params]
    f = Instruction(name="fusion", opcode="fusion", shape=entry.root.shape, operands=ps, attrs={"kind": "kLoop", "calls": entry})
    wrapper.add(f)
    wrapper.root = f
    return f
