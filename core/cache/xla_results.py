"""XLA's ``AutotuneResults`` text proto in and out of fusegen's cache (``xla_gpu_dump/load_autotune_results``).

The file XLA writes with ``xla_gpu_dump_autotune_results_to`` and reads with
``xla_gpu_load_autotune_results_from`` is the text form of ``xla.AutotuneResults``
(``xla/autotune_results.proto``; loaded by ``AutotunerUtil::LoadAutotuneResults``,
``xla/service/gpu/autotuning/autotuner_util.cc``)::

    version: 3
    results {
      device: "CUDA: 9.0, Cores: 132, GPU clock: 1.98 GHz, ..."   # DeviceDescriptionToCacheKey
      hlo: "{\\n  tmp_0 = f16[16,51]{1,0} parameter(0)\\n ...}"        # AutotuneCacheKey hlo_canonical
      result {                                                     # xla.AutotuneResult (autotuning.proto)
        scratch_bytes: 0
        run_time { nanos: 31744 }
        triton { block_m: 32 block_n: 32 block_k: 32 split_k: 1 num_stages: 1 num_warps: 4 num_ctas: 1 }
      }
    }

Mapped backends (the entries XLA can express): ``triton`` (``TritonGemmKey``), ``cublaslt`` (``GemmKey``:
``algorithm``, ``autotune_workspace_size``) and ``cudnn`` (``stream_executor.dnn.AlgorithmProto``: ``algo_id``
is the plan id, ``workspace_size`` its workspace). Keys: XLA's ``device`` is fusegen's model string verbatim;
XLA's ``hlo`` of a fusion is its fused computation (``{ ... }``), which fusegen's key prefixes with the fusion
and backend kind; XLA keys by computation only, so an imported Triton result is stored for both Triton GEMM
kinds (``__triton_gemm``, ``__triton_nested_gemm_fusion``), a cuDNN result for ``__cudnn$fusion``; a ``gemm`` result
for a fusion is XLA's cuBLAS fallback (``CUBLASLT_FISSION``, ``legacy_cache.cc``), fusegen's ``cublaslt_fission``
backend, stored for both Triton GEMM kinds and written back as ``gemm``. XLA keys
carry no autotuner options: an import takes the fingerprint of the options it is given.

Nothing is dropped silently: unknown fields and result kinds fusegen cannot hold are returned as
:class:`XlaResultsReport` notes naming the file and line; a ``version`` other than 3 is an error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

import attrs

from fusegen.cache import provenance
from fusegen.cache.format import CacheEntry, TuneResult
from fusegen.cache.key import CURRENT_VERSION, CacheKey
from fusegen.codegen_backend import Config

#: ``AutotunerUtil`` ``kVersion`` (autotuner_util.cc): the only version XLA (and fusegen) reads.
XLA_RESULTS_VERSION = 3
TRITON_KINDS = ("__triton_gemm", "__triton_nested_gemm_fusion")
CUDNN_KIND = "__cudnn$fusion"
#: fusegen's name of XLA's ``CUBLASLT_FISSION`` backend (the cuBLAS fallback of a Triton GEMM fusion)
FISSION_BACKEND = "cublaslt_fission"
_FUSED = "fused_computation {"


class XlaResultsError(ValueError):
    """The file is not an ``AutotuneResults`` text proto fusegen can read (message: ``file:line: why``)."""


# --------------------------------------------------------------------------------------------
# Text format: a small reader/writer of protobuf's text format
# --------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""\s*(?:\#[^\n]*\n?\s*)*(?:
    (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|
    (?P<punct>[{}<>:\[\],;])|
    (?P<word>[-+]?[A-Za-z0-9_.+-]+))""", re.X)
_ESC = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", '"': b'"', "'": b"'", "a": b"\a", "b": b"\b",
        "f": b"\f", "v": b"\v", "?": b"?"}


def _unescape(body: str, source: str, line: int) -> str:
    out = bytearray()
    i = 0
    raw = body.encode("utf-8")
    while i < len(raw):
        c = raw[i:i + 1]
        if c != b"\\":
            out += c
            i += 1
            continue
        n = chr(raw[i + 1])
        if n in _ESC:
            out += _ESC[n]
            i += 2
        elif n in "01234567":
            m = re.match(rb"[0-7]{1,3}", raw[i + 1:])
            out.append(int(m.group(), 8) & 0xFF)
            i += 1 + len(m.group())
        elif n == "x":
            m = re.match(rb"[0-9A-Fa-f]{1,2}", raw[i + 2:])
            if not m:
                raise XlaResultsError(f"{source}:{line}: bad \\x escape in a string")
            out.append(int(m.group(), 16))
            i += 2 + len(m.group())
        else:
            raise XlaResultsError(f"{source}:{line}: unknown escape \\{n} in a string")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise XlaResultsError(f"{source}:{line}: string is not UTF-8") from None


def _escape(text: str) -> str:
    """C-style escaping as protobuf's text printer (non-ASCII bytes as octal)."""
    out = []
    for b in text.encode("utf-8"):
        ch = chr(b)
        if ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch in "\"'\\":
            out.append("\\" + ch)
        elif 0x20 <= b < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return "".join(out)


@attrs.define
class Field:
    """One parsed field: ``value`` is a str/int/float/bool/enum name or a list of child fields."""

    name: str
    value: Any
    line: int


def parse_text_proto(text: str, source: str) -> list[Field]:
    """Fields of a text-format message (no schema: numbers, strings, identifiers, nested messages).

    Raises:
        XlaResultsError: a syntax error, naming ``source`` and the line.
    """
    pos = 0
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_of(p: int) -> int:
        lo, hi = 0, len(line_starts)
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if line_starts[mid] <= p:
                lo = mid
            else:
                hi = mid
        return lo + 1

    def next_token():
        nonlocal pos
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos and not m.lastgroup:
            rest = text[pos:].strip()
            if not rest or rest.startswith("#"):
                pos = len(text)
                return None, None, line_of(pos)
            raise XlaResultsError(f"{source}:{line_of(pos)}: cannot read {rest[:20]!r}")
        start = m.start(m.lastgroup)
        pos = m.end()
        return m.lastgroup, m.group(m.lastgroup), line_of(start)

    def message(close: str | None) -> list[Field]:
        nonlocal pos
        fields: list[Field] = []
        while True:
            kind, tok, line = next_token()
            if kind is None:
                if close is not None:
                    raise XlaResultsError(f"{source}:{line}: missing {close!r} at the end of the file")
                return fields
            if kind == "punct" and tok == close:
                return fields
            if kind == "punct" and tok in ",;":
                continue
            if kind != "word":
                raise XlaResultsError(f"{source}:{line}: expected a field name, got {tok!r}")
            name = tok
            kind, tok, vline = next_token()
            if kind == "punct" and tok == ":":
                kind, tok, vline = next_token()
            if kind == "punct" and tok in "{<":
                fields.append(Field(name, message("}" if tok == "{" else ">"), line))
            elif kind == "str":
                parts = [_unescape(tok[1:-1], source, vline)]
                # Adjacent string literals concatenate.
                while True:
                    save = pos
                    k2, t2, l2 = next_token()
                    if k2 == "str":
                        parts.append(_unescape(t2[1:-1], source, l2))
                    else:
                        pos = save
                        break
                fields.append(Field(name, "".join(parts), line))
            elif kind == "word":
                fields.append(Field(name, _scalar(tok), line))
            elif kind == "punct" and tok == "[":
                raise XlaResultsError(f"{source}:{vline}: list values ([...]) are not used by AutotuneResults")
            else:
                raise XlaResultsError(f"{source}:{vline}: field {name!r} has no value")

    return message(None)


def _scalar(tok: str) -> Any:
    low = tok.lower()
    if low in ("true", "t"):
        return True
    if low in ("false", "f"):
        return False
    try:
        return int(tok, 0)
    except ValueError:
        pass
    try:
        return float(tok.rstrip("fF")) if re.match(r"^[-+]?[0-9.]", tok) else tok
    except ValueError:
        return tok


def _write(fields: list[tuple[str, Any]], indent: int = 0) -> list[str]:
    pad = "  " * indent
    lines = []
    for name, v in fields:
        if name == "#":  # a comment line (text format allows them; XLA's reader skips them)
            lines.append(f"{pad}# {v}")
        elif isinstance(v, list):
            lines.append(f"{pad}{name} {{")
            lines.extend(_write(v, indent + 1))
            lines.append(f"{pad}}}")
        elif isinstance(v, bool):
            lines.append(f"{pad}{name}: {'true' if v else 'false'}")
        elif isinstance(v, str) and not (isinstance(v, _Enum)):
            lines.append(f'{pad}{name}: "{_escape(v)}"')
        else:
            lines.append(f"{pad}{name}: {v}")
    return lines


class _Enum(str):
    """An enum value: written bare (``kind: WRONG_RESULT``), not quoted."""


# --------------------------------------------------------------------------------------------
# Schema: the AutotuneResults fields fusegen reads (anything else is reported)
# --------------------------------------------------------------------------------------------

_TRITON_FIELDS = ("block_m", "block_n", "block_k", "split_k", "num_stages", "num_warps", "num_ctas",
                  "is_tma_allowed", "is_warp_specialization_allowed", "waves_per_eu")
_SCHEMA: dict[str, dict[str, Any]] = {
    "AutotuneResults": {"version": int, "results": "Entry"},
    "Entry": {"device": str, "hlo": str, "result": "AutotuneResult"},
    "AutotuneResult": {"scratch_bytes": int, "run_time": "Duration", "failure": "FailureResult", "conv": "ConvKey",
                       "gemm": "GemmKey", "triton": "TritonGemmKey", "cuda_conv_plan": "CudaConvPlanKey",
                       "custom_kernel_fusion": "CustomKernelFusionKey", "algorithm": "AlgorithmProto",
                       "other": "BackendConfigKey"},
    "Duration": {"seconds": int, "nanos": int},
    "FailureResult": {"kind": "enum", "msg": str, "reference_conv": "ConvKey", "reference_gemm": "GemmKey",
                      "reference_cuda_conv_plan": "CudaConvPlanKey", "reference_algorithm": "AlgorithmProto",
                      "buffer_address": int},
    "ConvKey": {"algorithm": int, "tensor_ops_enabled": bool},
    "GemmKey": {"algorithm": int, "autotune_workspace_size": int},
    "TritonGemmKey": {f: (bool if f.startswith("is_") else int) for f in _TRITON_FIELDS},
    "CudaConvPlanKey": {"exec_plan_id": str},
    "CustomKernelFusionKey": {"kernel_index": int},
    "AlgorithmProto": {"algo_id": int, "math_type": "enum", "tuning_knobs": "Knob", "is_cudnn_frontend": bool,
                       "workspace_size": "UInt64Value"},
    "Knob": {"key": int, "value": int},
    "UInt64Value": {"value": int},
    "BackendConfigKey": {"name": str, "config": "Any"},
    "Any": {"type_url": str, "value": str},
}
_REPEATED = {("AutotuneResults", "results"), ("AlgorithmProto", "tuning_knobs")}


def _to_dict(fields: list[Field], msg: str, source: str, notes: list[str], path: str) -> dict:
    """Fields of message type ``msg`` as a dict (repeated fields as lists); unknown fields noted."""
    schema = _SCHEMA[msg]
    out: dict[str, Any] = {}
    for f in fields:
        typ = schema.get(f.name)
        if typ is None:
            notes.append(f"{source}:{f.line}: unknown field {path}{f.name} (not in XLA's {msg}); ignored")
            continue
        if isinstance(typ, str) and typ != "enum":
            if not isinstance(f.value, list):
                raise XlaResultsError(f"{source}:{f.line}: field {path}{f.name} must be a message {{...}}")
            v = _to_dict(f.value, typ, source, notes, f"{path}{f.name}.")
        else:
            v = f.value
            want = str if typ == "enum" else typ
            if isinstance(v, list) or (want is int and (isinstance(v, bool) or not isinstance(v, int))) or \
                    (want is bool and not isinstance(v, bool)) or (want is str and not isinstance(v, str)):
                raise XlaResultsError(f"{source}:{f.line}: field {path}{f.name} must be "
                                      f"{'an enum name' if typ == 'enum' else want.__name__}, got {v!r}")
        if (msg, f.name) in _REPEATED:
            out.setdefault(f.name, []).append(v)
        else:
            out[f.name] = v
    return out


# --------------------------------------------------------------------------------------------
# Results <-> cache entries
# --------------------------------------------------------------------------------------------

@attrs.define
class XlaResultsReport:
    """What an import or export did: entries, and one note per thing not carried over (file:line: why)."""

    entries: list[CacheEntry] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)
    skipped: int = 0
    results: int = 0
    estimates_left_out: int = 0  # export: entries whose figure is not a GPU measurement, left out
    estimates_marked: int = 0  # export with include_estimates: written without run_time, after a comment


def _xla_hlo(key_hlo: str) -> tuple[str | None, str]:
    """``(fusion backend kind or None, XLA's hlo text)`` of a fusegen canonical HLO."""
    head, _, rest = key_hlo.partition("\n")
    m = re.match(r"^fusion kind=(\S*) backend=(\S*)$", head)
    if not m:
        return None, key_hlo
    i = rest.rfind(_FUSED)
    return m.group(2), rest[:i] + "{" + rest[i + len(_FUSED):]


def _fusegen_hlo(xla_hlo: str, kind: str | None) -> str:
    if kind is None:
        return xla_hlo
    i = 0 if xla_hlo.startswith("{") else xla_hlo.rfind("\n{\n") + 1
    return f"fusion kind=kCustom backend={kind}\n" + xla_hlo[:i] + _FUSED + xla_hlo[i + 1:]


def _is_computation(xla_hlo: str) -> bool:
    return xla_hlo.startswith("{") or "\n{\n" in xla_hlo


def _config_of(res: dict, where: str, notes: list[str]) -> Config | None:
    if "triton" in res:
        t = res["triton"]
        bad = [f"{f}={t[f]}" for f, d in (("split_k", 1), ("is_warp_specialization_allowed", False),
                                          ("waves_per_eu", 0)) if f in t and t[f] not in (d, 0)]
        if bad:
            notes.append(f"{where}: triton config with {', '.join(bad)} cannot be held by fusegen's Triton backend; "
                         f"entry skipped")
            return None
        return Config("triton", {"block_m": t.get("block_m", 0), "block_n": t.get("block_n", 0),
                                 "block_k": t.get("block_k", 0), "num_stages": t.get("num_stages", 0),
                                 "num_warps": t.get("num_warps", 0), "num_ctas": t.get("num_ctas", 0),
                                 "is_tma_allowed": bool(t.get("is_tma_allowed", False))})
    if "gemm" in res:
        g = res["gemm"]
        return Config("cublaslt", {"algorithm": g.get("algorithm", 0),
                                   "workspace_bytes": g.get("autotune_workspace_size", 0)})
    if "algorithm" in res:
        a = res["algorithm"]
        values: dict[str, Any] = {"plan_id": a.get("algo_id", 0),
                                  "workspace_bytes": a.get("workspace_size", {}).get("value", 0)}
        if a.get("math_type") not in (None, "DEFAULT_MATH"):
            values["math_type"] = a["math_type"]
        if a.get("tuning_knobs"):
            values["tuning_knobs"] = {str(k.get("key", 0)): k.get("value", 0) for k in a["tuning_knobs"]}
        if "is_cudnn_frontend" in a:
            values["is_cudnn_frontend"] = a["is_cudnn_frontend"]
        return Config("cudnn", values)
    kinds = [k for k in ("conv", "cuda_conv_plan", "custom_kernel_fusion", "other") if k in res]
    if kinds:
        notes.append(f"{where}: result kind {kinds[0]!r} has no fusegen backend (mapped: triton, gemm -> cublaslt, "
                     f"algorithm -> cudnn); entry skipped")
    else:
        notes.append(f"{where}: result has no config (no triton/gemm/algorithm key); entry skipped")
    return None


def entries_from_text(text: str, source: str, options_fingerprint: str = "") -> XlaResultsReport:
    """Cache entries of an ``AutotuneResults`` text proto.

    Args:
        text: the file's text; ``source`` names it in messages.
        options_fingerprint: fingerprint of the autotuner options the entries are stored under
            (:meth:`fusegen.autotuning.autotuner.AutotuneOptions.fingerprint`); XLA's keys have none.

    Returns:
        the entries (one per mapped result; two for a Triton result, one per Triton GEMM kind) and notes on
        every unknown field and skipped result. Failed results (``failure`` set) are skipped with a note.

    Raises:
        XlaResultsError: syntax errors, a wrong field type, or a version other than 3.
    """
    fields = parse_text_proto(text, source)
    notes: list[str] = []
    top = _to_dict(fields, "AutotuneResults", source, notes, "")
    version = top.get("version", 0)
    if version != XLA_RESULTS_VERSION:
        line = next((f.line for f in fields if f.name == "version"), 1)
        raise XlaResultsError(f"{source}:{line}: AutotuneResults version {version}; fusegen reads version "
                              f"{XLA_RESULTS_VERSION} (XLA's autotuner_util.cc kVersion)")
    rep = XlaResultsReport(notes=notes)
    lines = [f.line for f in fields if f.name == "results"]
    for e, line in zip(top.get("results", []), lines):
        rep.results += 1
        where = f"{source}:{line}"
        res = e.get("result", {})
        if "failure" in res:
            rep.notes.append(f"{where}: a failed result ({res['failure'].get('kind', 'UNKNOWN')}); entry skipped")
            rep.skipped += 1
            continue
        cfg = _config_of(res, where, rep.notes)
        if cfg is None:
            rep.skipped += 1
            continue
        hlo = e.get("hlo", "")
        fusion = _is_computation(hlo)
        if cfg.backend == "triton" and fusion:
            kinds: tuple[str | None, ...] = TRITON_KINDS
        elif cfg.backend == "cudnn" and fusion:
            kinds = (CUDNN_KIND,)
        elif cfg.backend == "cublaslt" and not fusion:
            kinds = (None,)
        elif cfg.backend == "cublaslt" and fusion:  # XLA's cuBLAS fallback won the fusion (LegacyCache: a GemmKey
            cfg = Config(FISSION_BACKEND, dict(cfg.values))  # on a fusion is CUBLASLT_FISSION)
            kinds = TRITON_KINDS
        else:
            rep.notes.append(f"{where}: a {cfg.backend} result for {'a fusion' if fusion else 'an instruction'} "
                             f"has no fusegen key; entry skipped")
            rep.skipped += 1
            continue
        rt = res.get("run_time")
        dur = None if rt is None else (rt.get("seconds", 0) * 1_000_000_000 + rt.get("nanos", 0)) / 1000.0
        # XLA's results are its measurements on the device the entry names; one without a run time (fusegen writes
        # its estimates so, when asked to) is not, and a GPU run measures it again
        src = (provenance.measured(e.get("device", ""), "xla") if dur is not None else
               provenance.Source("unknown", note="an XLA AutotuneResults entry without run_time"))
        for kind in kinds:
            key = CacheKey(e.get("device", ""), _fusegen_hlo(hlo, kind), CURRENT_VERSION, options_fingerprint)
            rep.entries.append(CacheEntry(key, TuneResult(cfg, "", dur, int(res.get("scratch_bytes", 0)), 0, {}, src)))
    return rep


def _result_fields(entry: CacheEntry) -> list[tuple[str, Any]] | None:
    r = entry.result
    v = r.config.values
    out: list[tuple[str, Any]] = []
    if r.scratch_bytes:
        out.append(("scratch_bytes", int(r.scratch_bytes)))
    if r.duration_us is not None and r.source.is_measurement:  # XLA's run_time is a measurement, never an estimate
        ns = round(r.duration_us * 1000)
        out.append(("run_time", ([("seconds", ns // 1_000_000_000)] if ns >= 1_000_000_000 else [])
                    + [("nanos", ns % 1_000_000_000)]))
    b = r.config.backend
    if b == "triton":
        out.append(("triton", [("block_m", int(v.get("block_m", 0))), ("block_n", int(v.get("block_n", 0))),
                               ("block_k", int(v.get("block_k", 0))), ("split_k", 1),
                               ("num_stages", int(v.get("num_stages", 0))), ("num_warps", int(v.get("num_warps", 0))),
                               ("num_ctas", int(v.get("num_ctas", 0)))]
                    + ([("is_tma_allowed", True)] if v.get("is_tma_allowed") else [])))
    elif b in ("cublaslt", FISSION_BACKEND):
        out.append(("gemm", [("algorithm", int(v.get("algorithm", 0))),
                             ("autotune_workspace_size", int(v.get("workspace_bytes", 0)))]))
    elif b == "cudnn":
        a: list[tuple[str, Any]] = [("algo_id", int(v.get("plan_id", 0)))]
        if v.get("math_type"):
            a.append(("math_type", _Enum(v["math_type"])))
        for k, kv in sorted((v.get("tuning_knobs") or {}).items(), key=lambda kv: int(kv[0])):
            a.append(("tuning_knobs", [("key", int(k)), ("value", int(kv))]))
        if "is_cudnn_frontend" in v:
            a.append(("is_cudnn_frontend", bool(v["is_cudnn_frontend"])))
        if v.get("workspace_bytes"):
            a.append(("workspace_size", [("value", int(v["workspace_bytes"]))]))
        out.append(("algorithm", a))
    else:
        return None
    return out


def entries_to_text(entries: Iterable[CacheEntry], include_estimates: bool = False) -> tuple[str, XlaResultsReport]:
    """``AutotuneResults`` text (version 3) of the entries XLA can express, sorted by (device, hlo).

    Entries of other backends (``host``...) or keys that are not a fusion of a mapped kind / a cuBLASLt call
    are left out with a note each. Entries that map to the same XLA key and result (a Triton result stored
    for both Triton GEMM kinds) are written once.

    XLA reads every ``run_time`` as its own measurement, so an entry whose figure is not a GPU measurement
    (estimated by a model, CPU interpreter time, unknown: :class:`~fusegen.cache.provenance.Source`) is left out
    and counted in ``estimates_left_out``; with ``include_estimates`` it is written without ``run_time``, after a
    ``# fusegen: ...`` comment saying where its figure came from (``estimates_marked``).
    """
    rep = XlaResultsReport()
    rows: dict[tuple[str, str], list] = {}
    for e in entries:
        kind, hlo = _xla_hlo(e.key.hlo)
        b = e.result.config.backend
        ok = (b == "triton" and kind in TRITON_KINDS) or (b == "cudnn" and kind == CUDNN_KIND) or \
             (b == "cublaslt" and kind is None) or (b == FISSION_BACKEND and kind in TRITON_KINDS)
        fields = _result_fields(e) if ok else None
        if fields is None:
            rep.notes.append(f"entry {e.digest[:12]} ({e.result.config.name}"
                             f"{', ' + kind if kind else ''}): not expressible in XLA's AutotuneResults; left out")
            rep.skipped += 1
            continue
        if not e.result.source.is_measurement and e.result.source.kind != "untimed":
            if not include_estimates:
                rep.estimates_left_out += 1
                rep.notes.append(f"entry {e.digest[:12]} ({e.result.config.name}): {e.result.source.label}, not a "
                                 f"GPU measurement; left out")
                continue
            rep.estimates_marked += 1
        k = (e.key.model, hlo)
        if k in rows and rows[k] != fields:
            rep.notes.append(f"entry {e.digest[:12]}: another entry has the same XLA key with a different result "
                             f"({e.result.config.name}); the first (by key digest) is written")
            rep.skipped += 1
            continue
        rows.setdefault(k, fields)
        rep.entries.append(e)
    body: list[tuple[str, Any]] = [("version", XLA_RESULTS_VERSION)]
    marks = {(e.key.model, _xla_hlo(e.key.hlo)[1]): e.result.source.label for e in rep.entries
             if not e.result.source.is_measurement and e.result.source.kind != "untimed"}
    for (device, hlo), fields in sorted(rows.items()):
        if (device, hlo) in marks:
            body.append(("#", f"fusegen: {marks[(device, hlo)]} (not a measurement: no run_time)"))
        body.append(("results", [("device", device), ("hlo", hlo), ("result", fields)]))
    rep.results = len(rows)
    return "\n".join(_write(body)) + "\n", rep


def read_file(path: str | Path, options_fingerprint: str = "") -> XlaResultsReport:
    """:func:`entries_from_text` of a file (``XlaResultsError`` naming it when unreadable)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise XlaResultsError(f"{path}: {getattr(e, 'strerror', None) or e}") from None
    return entries_from_text(text, str(path), options_fingerprint)


def write_file(path: str | Path, entries: Iterable[CacheEntry], include_estimates: bool = False) -> XlaResultsReport:
    """Write :func:`entries_to_text` to ``path`` (through a temp file and a rename)."""
    import os

    text, rep = entries_to_text(entries, include_estimates)
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)
    return rep


def load_into(tuner: Any, path: str | Path) -> XlaResultsReport:
    """``xla_gpu_load_autotune_results_from``: put the file's entries into ``tuner``'s process-memory tier
    under its options fingerprint (XLA loads into its in-memory cache before compiling). Entries for another
    device model string are loaded too (they never match) and noted.

    Raises:
        XlaResultsError: as :func:`read_file`.
    """
    from fusegen.cache.key import model_string_for

    rep = read_file(path, tuner.fingerprint)
    model = model_string_for(tuner.device)
    other = sorted({e.key.model for e in rep.entries if e.key.model != model})
    for e in rep.entries:
        tuner.cache.memory.put(e)
    if other:
        rep.notes.append(f"{path}: {sum(e.key.model != model for e in rep.entries)} entries are for another device "
                         f"({'; '.join(other[:2])}) than {model!r} and will not match")
    return rep


def dump_from(tuner: Any, path: str | Path) -> XlaResultsReport:
    """``xla_gpu_dump_autotune_results_to``: write every entry of ``tuner``'s process memory (tuned, loaded or
    read from the directory this run) that XLA can express."""
    return write_file(path, sorted(tuner.cache.memory.entries(), key=lambda e: e.digest))
