"""Each collective of an SPMD module priced on its device group, and how much of it hides under compute.

Anchored on XLA's ``GpuPerformanceWithCollectiveModel`` (``xla/service/gpu/model/gpu_collective_performance_model
.cc``) and ``GpuHloCostAnalysis``'s bytes rules: on a group of ``n`` devices a ring moves, per device,

* all-reduce: ``2 (n - 1) / n`` x the buffer, in ``2 (n - 1)`` steps;
* all-gather: ``(n - 1) / n`` x the gathered (output) buffer, reduce-scatter ``(n - 1) / n`` x the input buffer,
  in ``n - 1`` steps each; collective-broadcast the buffer once, pipelined over ``n - 1`` hops;
* all-to-all: ``(n - 1) / n`` x the buffer, one message to each of the ``n - 1`` peers;
* collective-permute: the buffer once, one hop.

XLA's own model prices only all-reduce (a 5 µs launch plus the bytes over a bus bandwidth of 16 channels x a
per-channel NVLink figure). fusegen prices every kind as NCCL's tuning model does (``src/graph/tuning.cc``,
public): for each algorithm and protocol, ``time = base latency + steps x hop latency + wire bytes / bus
bandwidth``, and the collective takes the fastest, as NCCL picks. The figures:

* bus bandwidth from the device description: ``nvlink_links x nvlink_link_bandwidth`` (H100/H200 SXM: 18 x 25
  GB/s = 450 GB/s each way) x NCCL's achievable share of a link (20.6 of 25 GB/s on sm_90, 20 on sm_80); the
  protocols ``Simple`` (all of it), ``LL128`` (x 0.92) and ``LL`` (a quarter for all-reduce, a third else);
* latencies: NCCL's ring base latencies (LL 6.6, LL128 14, Simple 8.4 µs) and per-hop latencies relative to the
  device's ``nvlink_step_latency_s`` (the LL hop; LL128 x 1.9/0.6, Simple x 3.4/0.6, NCCL's ratios);
* NVLink SHARP (all-reduce in the NVSwitch, sm_90 and later, the group inside one NVLink domain): NCCL's 23 µs
  of latency; each device sends its buffer up and reads the sum back once, whatever the group, at the rate that
  gives 8 H100s their 475 GB/s of all-reduce bus bandwidth (ASTRA-sim's NCCL calibration): 0.60 of the links'
  one-way bandwidth;
* XLA's one-shot Triton all-reduce (``collective_backend_config.kernel_strategy``
  ``KERNEL_STRATEGY_TRITON_ONE_SHOT``): one kernel launch, ``(n - 1)`` x the buffer read from the peers, one
  1.5 µs barrier (XLA's ``SolGPUCostModel::IntraNodeAllReduceLatency``);
* a group spanning NVLink domains goes at the network's bandwidth (``network_bandwidth`` per GPU) with NCCL's
  network hop latencies (LL 2.7, LL128 4.0, Simple 9.6 µs); a device without NVLink uses PCIe (hops 1.0, 2.5,
  5.7 µs).

Overlap: an asynchronous pair (``*-start`` / ``*-done``, ``async-start`` / ``async-done``, not marked
``is_sync``) runs beside the fusions and library calls scheduled between its start and its done in the same
computation; each of those hides at most its own estimated time, given out in schedule order
(:func:`schedule_overlap`). The hidden part is ``overlapped_us``, the rest ``exposed_us``; a synchronous
collective is all exposed. Contention between a collective's copy engines / SMs and the overlapped kernels is
not modelled.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import attrs

from fusegen.hlo.dtypes import bit_width

#: NCCL's ring base latencies (µs) per protocol.
BASE_LATENCY_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
#: NCCL's per-hop latency of each protocol relative to LL's, over NVLink (0.6, 1.9, 3.4 µs).
NVLINK_HOP_RATIO = {"LL": 1.0, "LL128": 1.9 / 0.6, "Simple": 3.4 / 0.6}
#: NCCL's per-hop latencies (µs) over PCIe and over the network.
PCIE_HOP_US = {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}
NET_HOP_US = {"LL": 2.7, "LL128": 4.0, "Simple": 9.6}
#: NCCL's achievable share of an NVLink link by SM major version (its SMxx_NVLINK_BW over 25 GB/s).
NVLINK_EFFICIENCY = {8: 20.0 / 25.0, 9: 20.6 / 25.0, 10: 40.1 / 50.0}
#: LL128's share of the bus bandwidth.
LL128_SHARE = 0.92
#: NVLink SHARP: latency (µs), and the buffer's rate as a share of the links' one-way bandwidth (475 GB/s of bus
#: bandwidth on 8 H100s is 475 / (2 x 7 / 8) = 271 GB/s of buffer over 450 GB/s of links).
NVLS_LATENCY_US = 23.0
NVLS_BUFFER_SHARE = 475.0 / (2 * 7 / 8) / 450.0
#: XLA's one-shot all-reduce: the NVLink barrier (µs) and the kernel launch (µs).
ONE_SHOT_BARRIER_US = 1.5
ONE_SHOT_LAUNCH_US = 1.0
#: Network efficiency (share of the NIC's line rate a ring reaches).
NET_EFFICIENCY = 0.9

#: The collective kinds priced (``-start`` forms and ``async-start`` wrappers map onto these).
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute", "collective-broadcast")


@attrs.frozen
class CollectiveEstimate:
    """One collective's estimated time on its group.

    Attributes:
        kind: one of :data:`KINDS`; group_size: devices in its (largest) group.
        bytes: the buffer the bytes rule scales (see the module docstring), bytes.
        wire_bytes: bytes one device sends (XLA's rule: ``2 (n - 1) / n``, ``(n - 1) / n`` or 1 x ``bytes``).
        algorithm: ``ring``, ``nvls``, ``one-shot``, ``p2p`` (permute, all-to-all) or ``none`` (one device).
        protocol: ``LL``, ``LL128``, ``Simple`` or ``-``; link: ``nvlink``, ``pcie``, ``network`` or ``-``.
        steps: hops on the critical path; latency_s: the fixed part; bus_bandwidth: bytes/s the wire bytes go at.
        seconds: the total.
    """

    kind: str
    group_size: int
    bytes: int
    wire_bytes: int
    algorithm: str
    protocol: str
    link: str
    steps: int
    latency_s: float
    bus_bandwidth: float
    seconds: float

    @property
    def us(self) -> float:
        return self.seconds * 1e6

    def to_json(self) -> dict:
        """``{"us", "kind", "group_size", "bytes", "wire_bytes", "algorithm", "protocol", "link", "steps",
        "latency_us", "bus_bandwidth_gbps", "label"}`` (µs, bytes, GB/s = 1e9 bytes/s)."""
        from fusegen.perf.estimate import LABEL, MODEL_VERSION

        return {"us": round(self.us, 6), "kind": self.kind, "group_size": self.group_size, "bytes": int(self.bytes),
                "wire_bytes": int(self.wire_bytes), "algorithm": self.algorithm, "protocol": self.protocol,
                "link": self.link, "steps": self.steps, "latency_us": round(self.latency_s * 1e6, 6),
                "bus_bandwidth_gbps": round(self.bus_bandwidth / 1e9, 3), "model_version": MODEL_VERSION,
                "label": LABEL}


def base_kind(opcode: str) -> str:
    """``all-gather-start`` -> ``all-gather``; raises ``ValueError`` for an opcode that is no collective."""
    kind = opcode[: -len("-start")] if opcode.endswith("-start") else opcode
    if kind not in KINDS:
        raise ValueError(f"{opcode!r} is not a collective fusegen prices (one of {', '.join(KINDS)})")
    return kind


def wire_factor(kind: str, n: int) -> float:
    """XLA's bytes-transferred rule: what one device of a group of ``n`` sends, as a multiple of the buffer."""
    if n <= 1:
        return 0.0
    if kind == "all-reduce":
        return 2 * (n - 1) / n
    if kind in ("all-gather", "reduce-scatter", "all-to-all"):
        return (n - 1) / n
    return 1.0  # collective-permute, collective-broadcast


def ring_steps(kind: str, n: int) -> int:
    """Hops on a ring's critical path: ``2 (n - 1)`` for all-reduce, ``n - 1`` for all-gather, reduce-scatter,
    all-to-all (one message per peer) and broadcast, 1 for a permute."""
    if n <= 1:
        return 0
    if kind == "all-reduce":
        return 2 * (n - 1)
    return 1 if kind == "collective-permute" else n - 1


def _link(device: Any, spans_domains: bool) -> tuple[str, float, dict]:
    """``(link name, bus bandwidth bytes/s, hop latencies in seconds by protocol)`` for a group on ``device``."""
    links = int(getattr(device, "nvlink_links", 0) or 0)
    major = tuple(getattr(device, "compute_capability", (0, 0)))[0]
    if spans_domains and getattr(device, "network_bandwidth", 0):
        return "network", device.network_bandwidth * NET_EFFICIENCY, {p: v * 1e-6 for p, v in NET_HOP_US.items()}
    if links and getattr(device, "nvlink_link_bandwidth", 0):
        eff = NVLINK_EFFICIENCY.get(major, NVLINK_EFFICIENCY[8] if major < 8 else NVLINK_EFFICIENCY[10])
        hop = float(getattr(device, "nvlink_step_latency_s", 0.0) or 0.6e-6)
        return ("nvlink", links * device.nvlink_link_bandwidth * eff,
                {p: hop * r for p, r in NVLINK_HOP_RATIO.items()})
    pcie = float(getattr(device, "pcie_bandwidth", 0.0) or 0.0)
    if pcie <= 0:
        raise ValueError(f"device {getattr(device, 'name', device)!r} has no NVLink, PCIe or network bandwidth "
                         "to price a collective with")
    return "pcie", pcie * NVLINK_EFFICIENCY[8], {p: v * 1e-6 for p, v in PCIE_HOP_US.items()}


def estimate_collective(kind: str, nbytes: int, group_size: int, device: Any, *, spans_domains: bool = False,
                        kernel_strategy: str | None = None) -> CollectiveEstimate:
    """The time of one collective (see the module docstring).

    Args:
        kind: one of :data:`KINDS` (or a ``-start`` opcode).
        nbytes: the buffer the bytes rule scales: all-reduce, reduce-scatter, all-to-all, permute, broadcast:
            the operand bytes; all-gather: the gathered result's bytes.
        group_size: devices in the group (``n``); device: a :class:`fusegen.device.DeviceDescription`.
        spans_domains: the group crosses NVLink domains (nodes): the network carries it.
        kernel_strategy: an all-reduce's ``collective_backend_config.kernel_strategy``.

    Raises:
        ValueError: an unknown kind, a negative size or group, or a device without any interconnect figure.
    """
    kind = base_kind(kind)
    n = int(group_size)
    if nbytes < 0 or n < 1:
        raise ValueError(f"{kind}: bytes ({nbytes}) and group size ({n}) must be non-negative and positive")
    if n == 1:
        return CollectiveEstimate(kind, 1, int(nbytes), 0, "none", "-", "-", 0, 0.0, 0.0, 0.0)
    link, bus, hops = _link(device, spans_domains)
    wire = wire_factor(kind, n) * nbytes
    steps = ring_steps(kind, n)
    best: CollectiveEstimate | None = None

    def offer(algorithm: str, protocol: str, latency: float, bandwidth: float, st: int,
              transfer: float | None = None) -> None:
        nonlocal best
        t = latency + (wire / bandwidth if transfer is None else transfer)
        if best is None or t < best.seconds:
            bus_equiv = bandwidth if transfer is None else (wire / transfer if transfer else bandwidth)
            best = CollectiveEstimate(kind, n, int(nbytes), int(round(wire)), algorithm, protocol, link, st,
                                      latency, bus_equiv, t)

    algorithm = "p2p" if kind in ("collective-permute", "all-to-all") else "ring"
    ll_share = 0.25 if kind == "all-reduce" else 1 / 3
    for proto, share in (("LL", ll_share), ("LL128", LL128_SHARE), ("Simple", 1.0)):
        offer(algorithm, proto, BASE_LATENCY_US[proto] * 1e-6 + steps * hops[proto], bus * share, steps)
    major = tuple(getattr(device, "compute_capability", (0, 0)))[0]
    links = int(getattr(device, "nvlink_links", 0) or 0)
    if kind == "all-reduce" and link == "nvlink" and major >= 9:
        rate = links * device.nvlink_link_bandwidth * NVLS_BUFFER_SHARE
        offer("nvls", "Simple", NVLS_LATENCY_US * 1e-6, rate, 1, transfer=nbytes / rate)
    if kind == "all-reduce" and link == "nvlink" and kernel_strategy and "ONE_SHOT" in str(kernel_strategy).upper():
        one = ((ONE_SHOT_LAUNCH_US + ONE_SHOT_BARRIER_US) * 1e-6, (n - 1) * nbytes / bus)
        best = CollectiveEstimate(kind, n, int(nbytes), int((n - 1) * nbytes), "one-shot", "-", link, 1, one[0],
                                  bus, one[0] + one[1])
    assert best is not None
    return best


def _array_bytes(shapes: Iterable[Any]) -> int:
    total = 0
    for s in shapes:
        for leaf in (s.leaves() if s.is_tuple else [s]):
            if leaf.is_array and leaf.element_type not in ("token", "tuple"):
                total += (math.prod(leaf.dimensions) * bit_width(leaf.element_type) + 7) // 8
    return total


def buffer_bytes(inst: Any, group_size: int) -> int:
    """The buffer the bytes rule scales for collective ``inst`` (see :func:`estimate_collective`): its operands'
    bytes, an all-gather's operand bytes x the group size (the gathered result)."""
    operand = _array_bytes(o.shape for o in inst.operands)
    return operand * max(group_size, 1) if base_kind(inst.opcode) == "all-gather" else operand


def _kernel_strategy(inst: Any) -> str | None:
    bc = inst.attrs.get("backend_config")
    cbc = bc.get("collective_backend_config") if isinstance(bc, dict) else None
    return cbc.get("kernel_strategy") if isinstance(cbc, dict) else None


def _is_sync(inst: Any) -> bool:
    bc = inst.attrs.get("backend_config")
    cbc = bc.get("collective_backend_config") if isinstance(bc, dict) else None
    return bool(isinstance(cbc, dict) and str(cbc.get("is_sync", "false")).lower() == "true")


def _async_span(module: Any, computation: str, name: str) -> tuple[Any, list[Any], bool] | None:
    """``(computation, instructions between start and done, synchronous?)`` of collective ``name`` of
    ``computation``, or ``None`` when it is not an asynchronous pair (a plain collective, or no done found)."""
    comps = {c.name: c for c in module.computations}
    comp = comps.get(computation)
    if comp is None:
        return None
    start = next((i for i in comp.instructions if i.name == name), None)
    if start is None:
        return None
    sync = _is_sync(start)
    if not start.opcode.endswith("-start"):  # a plain collective, or one wrapped by async-start in a caller
        wrapper = next(((c, i) for c in module.computations for i in c.instructions
                        if i.opcode == "async-start" and any(cc.name == computation for cc in i.called_computations)),
                       None)
        if wrapper is None:
            return None
        comp, start = wrapper
        sync = sync or _is_sync(start)
    order = comp.instructions
    at = order.index(start)
    chain = {id(start)}
    for j in range(at + 1, len(order)):
        inst = order[j]
        if inst.operands and id(inst.operands[0]) in chain:
            if inst.opcode.endswith("-done"):
                return comp, order[at + 1: j], sync
            if inst.opcode == "async-update":
                chain.add(id(inst))
    return None


def schedule_overlap(module: Any, collectives: Iterable[tuple[Any, float]],
                     compute_us: Mapping[str, float]) -> dict[str, dict]:
    """How much of each collective hides under compute.

    Args:
        module: the module (its computations in schedule order).
        collectives: ``(Collective of fusegen.evaluator.spmd_plan, estimated µs)`` in schedule order.
        compute_us: estimated µs of each fusion and library call by instruction name.

    Returns:
        ``name -> {"async", "overlapped_us", "exposed_us", "overlapped_with": [names]}``; each compute
        instruction hides at most its own time, handed out to the collectives in schedule order.
    """
    left = dict(compute_us)
    out: dict[str, dict] = {}
    for c, us in collectives:
        span = _async_span(module, c.computation, c.name)
        if span is None or span[2]:
            out[c.name] = {"async": False, "overlapped_us": 0.0, "exposed_us": round(us, 6), "overlapped_with": []}
            continue
        need, hidden, names = us, 0.0, []
        for inst in span[1]:
            avail = left.get(inst.name, 0.0)
            if need <= 0:
                break
            if avail > 0:
                take = min(avail, need)
                left[inst.name] = avail - take
                hidden += take
                need -= take
                names.append(inst.name)
        out[c.name] = {"async": True, "overlapped_us": round(hidden, 6), "exposed_us": round(us - hidden, 6),
                       "overlapped_with": names}
    return out


def spans_domains(groups: Iterable[Iterable[int]], device: Any) -> bool:
    """A group holds devices of more than one NVLink domain (global device id // ``nvlink_domain``)."""
    domain = int(getattr(device, "nvlink_domain", 0) or 0)
    if domain <= 0:
        return False
    return any(len({d // domain for d in g}) > 1 for g in groups)


def estimate_plan_collective(c: Any, module: Any, device: Any) -> CollectiveEstimate:
    """:func:`estimate_collective` of a :class:`fusegen.evaluator.spmd_plan.Collective` of ``module`` (its largest
    group, its instruction's bytes and kernel strategy; a permute's group is its source-target pairs' hop).

    Raises:
        ValueError: as :func:`estimate_collective`; KeyError: the instruction is not in ``module``.
    """
    comp = next(cc for cc in module.computations if cc.name == c.computation)
    inst = next(i for i in comp.instructions if i.name == c.name)
    kind = base_kind(c.opcode)
    if kind == "collective-permute":
        n = 2 if c.pairs and any(s != t for s, t in c.pairs) else 1
        cross = spans_domains([(s, t) for s, t in c.pairs], device)
    else:
        n = max((len(g) for g in c.groups), default=1)
        cross = spans_domains(c.groups, device)
    return estimate_collective(kind, buffer_bytes(inst, n), n, device, spans_domains=cross,
                               kernel_strategy=_kernel_strategy(inst))


def module_collectives_json(module: Any, device: Any, compute_us: Mapping[str, float]) -> tuple[dict, dict]:
    """Every collective of ``module`` estimated and its overlap: ``({name: estimate JSON with "async",
    "overlapped_us", "exposed_us", "overlapped_with"}, {"collectives_us", "collectives_overlapped_us",
    "collectives_exposed_us"})``. A module fusegen cannot plan across devices, or without collectives, gives
    ``({}, zeros)``; a collective the model cannot price gets ``{"us": None, "error": ...}`` and counts 0."""
    from fusegen.evaluator.collectives import MultiDeviceUnsupported
    from fusegen.evaluator.spmd_plan import plan_spmd

    totals = {"collectives_us": 0.0, "collectives_overlapped_us": 0.0, "collectives_exposed_us": 0.0}
    try:
        plan = plan_spmd(module)
    except MultiDeviceUnsupported:
        return {}, totals
    rows: dict[str, dict] = {}
    priced = []
    for c in plan.collectives.values():
        try:
            est = estimate_plan_collective(c, module, device)
        except (ValueError, KeyError, StopIteration) as e:
            rows[c.name] = {"us": None, "error": f"{type(e).__name__}: {e}"}
            continue
        rows[c.name] = {**est.to_json(), "device": getattr(device, "name", "")}
        priced.append((c, est.us))
    for name, ov in schedule_overlap(module, priced, compute_us).items():
        rows[name].update(ov)
    for c, us in priced:
        totals["collectives_us"] += us
        totals["collectives_overlapped_us"] += rows[c.name]["overlapped_us"]
        totals["collectives_exposed_us"] += rows[c.name]["exposed_us"]
    return rows, {k: round(v, 6) for k, v in totals.items()}
