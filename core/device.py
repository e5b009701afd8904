"""GPU device descriptions (``stream_executor::DeviceDescription``) and presets.

Values come from XLA's target-config specs (``xla/backends/gpu/target_config/specs/*.txtpb``, the
reduced copies under ``shared/tools/jax_gpu_hlo``) and ``TestGpuDeviceInfo``
(``xla/service/gpu/gpu_device_info_for_tests.cc``). Units: bytes, bytes/s, GHz.

Presets: :data:`H200` (the default), :data:`H100`, :data:`A100`, :data:`RTXA6000` (XLA's test device
that every emitter lit test and ``hlo_fusion_analysis_test.cc`` use).
"""

from __future__ import annotations

import math
import re

import attrs


def _fmt_double(x: float) -> str:
    """``absl::StrCat`` of a double: six significant digits, no trailing zeros."""
    return f"{x:.6g}"


@attrs.frozen
class DeviceDescription:
    """What codegen heuristics need to know about a GPU.

    Attributes:
        name: short preset name (``"h200"``) or ``"custom"``.
        model: the device description string (``"NVIDIA H200 141GB HBM3e"``).
        compute_capability: ``(major, minor)``; for CUDA the SM version.
        platform: ``"CUDA"`` (``"ROCM"`` / ``"SYCL"`` only for descriptions read from specs).
        core_count: number of SMs.
        threads_per_warp: warp size (32 on NVIDIA).
        threads_per_core_limit, threads_per_block_limit: thread limits.
        shared_memory_per_block, shared_memory_per_block_optin, shared_memory_per_core: bytes.
        registers_per_core_limit, registers_per_block_limit: 32-bit registers.
        clock_rate_ghz: SM clock in GHz.
        memory_bandwidth: DRAM bandwidth in bytes/s.
        l2_cache_size: bytes.
        device_memory_size: DRAM bytes.
        block_dim_limit: grid limits ``(x, y, z)``.
        fpus_per_core: FP32 units per SM.
        dnn_version: cuDNN version string (``"0.0.0"``: fusegen links no cuDNN, as XLA's cache-key
            tests force it).
        gcn_arch_name: ROCm architecture (``gfx90a``) for ROCm descriptions, else ``""``.
        oneapi_architecture: oneAPI architecture (``BMG``) for SYCL descriptions, else ``""``.
        nvlink_links: NVLink links per GPU (0: none, the GPUs talk over PCIe).
        nvlink_link_bandwidth: bytes/s of one link in one direction (NVLink 3 and 4: 25 GB/s).
        nvlink_step_latency_s: seconds one hop of a collective's ring costs over NVLink (NCCL's low-latency
            protocol; the model scales it for its other protocols, :mod:`fusegen.perf.collectives`).
        nvlink_domain: GPUs one NVLink fabric joins (an NVSwitch node: 8); a group wider than that crosses the
            network.
        pcie_bandwidth: bytes/s of the host link in one direction (what GPUs without NVLink exchange over).
        network_bandwidth: bytes/s of the network one GPU has to other nodes in one direction (its NIC).
    """

    name: str
    model: str
    compute_capability: tuple[int, int]
    platform: str = "CUDA"
    core_count: int = 0
    threads_per_warp: int = 32
    threads_per_core_limit: int = 0
    threads_per_block_limit: int = 0
    shared_memory_per_block: int = 0
    shared_memory_per_block_optin: int = 0
    shared_memory_per_core: int = 0
    registers_per_core_limit: int = 0
    registers_per_block_limit: int = 0
    clock_rate_ghz: float = 0.0
    memory_bandwidth: int = 0
    l2_cache_size: int = 0
    device_memory_size: int = 0
    block_dim_limit: tuple[int, int, int] = (0, 0, 0)
    fpus_per_core: int = 0
    dnn_version: str = "0.0.0"
    gcn_arch_name: str = ""
    oneapi_architecture: str = ""
    nvlink_links: int = 0
    nvlink_link_bandwidth: float = 0.0
    nvlink_step_latency_s: float = 0.0
    nvlink_domain: int = 1
    pcie_bandwidth: float = 0.0
    network_bandwidth: float = 0.0

    @property
    def warp_size(self) -> int:
        return self.threads_per_warp


H200 = DeviceDescription(
    name="h200",
    model="NVIDIA H200 141GB HBM3e",
    compute_capability=(9, 0),
    core_count=132,
    threads_per_warp=32,
    threads_per_core_limit=2048,
    threads_per_block_limit=1024,
    shared_memory_per_block=49152,
    shared_memory_per_block_optin=232448,
    shared_memory_per_core=233472,
    registers_per_core_limit=65536,
    registers_per_block_limit=65536,
    clock_rate_ghz=1.98,
    memory_bandwidth=4_800_000_000_000,
    l2_cache_size=52_428_800,
    device_memory_size=151_397_597_184,
    block_dim_limit=(2_147_483_647, 65535, 65535),
    fpus_per_core=128,
    # NVLink 4: 18 links x 25 GB/s each way (900 GB/s both ways) through NVSwitch to 8 GPUs; PCIe Gen5 x16;
    # one 400 Gb/s NIC per GPU (HGX H100/H200). 0.6 us a ring hop: NCCL's NVLink figure for its LL protocol.
    nvlink_links=18, nvlink_link_bandwidth=25e9, nvlink_step_latency_s=0.6e-6, nvlink_domain=8,
    pcie_bandwidth=64e9, network_bandwidth=50e9,
)

#: The H200's SM, caches and fabric (the same Hopper die and HGX board) with the H100's 80 GB of HBM3.
H100 = attrs.evolve(
    H200,
    name="h100",
    model="NVIDIA H100 80GB HBM3",
    memory_bandwidth=3_352_320_000_000,
    device_memory_size=84_942_979_072,
)

A100 = DeviceDescription(
    name="a100",
    model="NVIDIA A100-SXM4-40GB",
    compute_capability=(8, 0),
    core_count=108,
    threads_per_warp=32,
    threads_per_core_limit=2048,
    threads_per_block_limit=1024,
    shared_memory_per_block=49152,
    shared_memory_per_block_optin=166912,
    shared_memory_per_core=167936,
    registers_per_core_limit=65536,
    registers_per_block_limit=65536,
    clock_rate_ghz=1.41,
    memory_bandwidth=1_555_200_000_000,
    l2_cache_size=41_943_040,
    device_memory_size=42_331_013_120,
    block_dim_limit=(2_147_483_647, 65535, 65535),
    fpus_per_core=64,
    # NVLink 3: 12 links x 25 GB/s each way through NVSwitch (DGX A100); PCIe Gen4 x16; 200 Gb/s NIC per GPU.
    nvlink_links=12, nvlink_link_bandwidth=25e9, nvlink_step_latency_s=0.6e-6, nvlink_domain=8,
    pcie_bandwidth=32e9, network_bandwidth=25e9,
)

#: ``TestGpuDeviceInfo::RTXA6000DeviceInfo()`` with its default compute capability (8, 9) as XLA
#: declares it in gpu_device_info_for_tests.h (the physical RTX A6000 is sm_86).
RTXA6000 = DeviceDescription(
    name="rtxa6000",
    model="NVIDIA RTX A6000",
    compute_capability=(8, 9),
    core_count=84,
    threads_per_warp=32,
    threads_per_core_limit=1536,
    threads_per_block_limit=1024,
    shared_memory_per_block=48 * 1024,
    shared_memory_per_block_optin=99 * 1024,
    shared_memory_per_core=100 * 1024,
    registers_per_core_limit=65536,
    registers_per_block_limit=65536,
    clock_rate_ghz=1.41,
    memory_bandwidth=768_096_000_000,
    l2_cache_size=6 * 1024 * 1024,
    device_memory_size=51_050_250_240,
    block_dim_limit=(2_147_483_647, 65535, 65535),
    fpus_per_core=128,
    pcie_bandwidth=32e9,  # PCIe Gen4 x16, no NVLink fabric
)

PRESETS: dict[str, DeviceDescription] = {d.name: d for d in (H200, H100, A100, RTXA6000)}
DEFAULT_DEVICE = H200


def get_device(name: str) -> DeviceDescription:
    """The preset called ``name`` (case-insensitive: ``h200``, ``h100``, ``a100``, ``rtxa6000``).

    Raises:
        ValueError: unknown name; the message lists the presets.
    """
    key = name.strip().lower().replace("-", "").replace("_", "")
    if key in PRESETS:
        return PRESETS[key]
    raise ValueError(f"unknown device {name!r}; presets: {', '.join(sorted(PRESETS))}")


def minimal_device(threads_per_warp: int = 32) -> DeviceDescription:
    """``DeviceDescription::FromProto(GpuDeviceInfoProto{})`` with only the warp size set.

    XLA's tests use this "invalid device" (hlo_fusion_analysis_test.cc ``InvalidDevice``,
    gpu_fusible_test.cc ``MakeDeviceDescription``): every count is 0.
    """
    return DeviceDescription(name="minimal", model="", compute_capability=(0, 0), threads_per_warp=threads_per_warp)


#: XLA prints a oneAPI architecture by its device name (the B580's BMG die is BMG_G21).
ONEAPI_ARCH_NAMES = {"BMG": "BMG_G21"}


def model_string(device: DeviceDescription) -> str:
    """The device part of XLA's autotune cache key.

    Mirrors ``AutotuneCacheKey::DeviceDescriptionToCacheKey`` (xla/service/gpu/autotuning/
    autotune_cache_key.cc): bandwidth rounded to GB/s (1e9 bytes/s), L2 in MiB, both printed as
    doubles with six significant digits, e.g.
    ``"CUDA: 9.0, Cores: 132, GPU clock: 1.98 GHz, Memory bandwidth: 4800 GB/s, L2 cache: 50 MB, DNN version: 0.0.0"``.
    SYCL devices print ``oneAPI: <architecture name>`` (``oneAPI: BMG_G21``), ROCm ``ROCM: <gcn arch>``.
    """
    if device.platform == "CUDA":
        cc = f"CUDA: {device.compute_capability[0]}.{device.compute_capability[1]}"
    elif device.platform == "ROCM":
        cc = f"ROCM: {device.gcn_arch_name.split(':')[0]}"
    elif device.platform == "SYCL":
        arch = device.oneapi_architecture
        cc = f"oneAPI: {ONEAPI_ARCH_NAMES.get(arch, arch)}"
    else:
        cc = f"{device.platform}: {device.model}"
    bw = math.floor(device.memory_bandwidth / 1e9 + 0.5)  # std::round: half away from zero
    l2 = device.l2_cache_size / float(1 << 20)
    return (
        f"{cc}, Cores: {device.core_count}, GPU clock: {_fmt_double(device.clock_rate_ghz)} GHz, "
        f"Memory bandwidth: {_fmt_double(bw)} GB/s, L2 cache: {_fmt_double(l2)} MB, "
        f"DNN version: {device.dnn_version}"
    )


_FIELD_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.+?)\s*$")


def from_target_config_text(text: str, name: str = "custom") -> DeviceDescription:
    """A description from a ``GpuTargetConfigProto`` text proto (XLA's ``specs/*.txtpb``).

    Only the scalar fields fusegen uses are read; nested rate tables are ignored. The DNN version
    is left at ``0.0.0`` (what XLA's cache-key test forces).

    Raises:
        ValueError: the text has no ``gpu_device_info`` fields.
    """
    fields: dict[str, str] = {}
    stack: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.endswith("{"):
            stack.append(line[:-1].strip())
            continue
        if line == "}":
            if stack:
                stack.pop()
            continue
        m = _FIELD_RE.match(line)
        if not m:
            continue
        key, val = m.group(1), m.group(2).strip('"')
        path = ".".join(stack + [key])
        fields.setdefault(path, val)
    g = "gpu_device_info."
    if not any(k.startswith(g) for k in fields):
        raise ValueError("target config text has no gpu_device_info fields")

    def num(key: str, default: float = 0) -> float:
        v = fields.get(g + key)
        return float(v) if v is not None else default

    platform = fields.get("platform_name", "CUDA")
    major = int(num("cuda_compute_capability.major"))
    minor = int(num("cuda_compute_capability.minor"))
    return DeviceDescription(
        name=name,
        model=fields.get("device_description_str", ""),
        compute_capability=(major, minor),
        platform=platform,
        core_count=int(num("core_count")),
        threads_per_warp=int(num("threads_per_warp", 32)),
        threads_per_core_limit=int(num("threads_per_core_limit")),
        threads_per_block_limit=int(num("threads_per_block_limit")),
        shared_memory_per_block=int(num("shared_memory_per_block")),
        shared_memory_per_block_optin=int(num("shared_memory_per_block_optin")),
        shared_memory_per_core=int(num("shared_memory_per_core")),
        registers_per_core_limit=int(num("registers_per_core_limit")),
        registers_per_block_limit=int(num("registers_per_block_limit")),
        clock_rate_ghz=num("clock_rate_ghz"),
        memory_bandwidth=int(num("memory_bandwidth")),
        l2_cache_size=int(num("l2_cache_size")),
        device_memory_size=int(num("device_memory_size")),
        block_dim_limit=(int(num("block_dim_limit_x")), int(num("block_dim_limit_y")), int(num("block_dim_limit_z"))),
        fpus_per_core=int(num("fpus_per_core")),
        gcn_arch_name=fields.get(g + "rocm_compute_capability.gcn_arch_name", ""),
        oneapi_architecture=fields.get(g + "oneapi_compute_capability.architecture", ""),
    )
