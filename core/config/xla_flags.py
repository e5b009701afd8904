"""Parsing ``XLA_FLAGS`` and ``--xla-flag NAME=VALUE`` into typed :class:`~fusegen.config.options.DebugOptions` values.

Mirrors XLA's flag syntax (``tsl/util/command_line_flags.cc`` via ``xla/parse_flags_from_env.cc``):
``--name=value`` for every type and bare ``--name`` for a true bool; bools take ``true``/``false`` (and ``1``/``0``);
a value cannot follow after a space. XLA dies on a flag it does not know; fusegen only honours a subset of
XLA's flags, so an unknown ``--xla_*`` flag is a warning (it may be a real XLA flag fusegen ignores), while a
bad value for an honoured flag is an error naming the flag and the expected type.
"""

from __future__ import annotations

import difflib
import shlex
from typing import Any

import attrs

from fusegen.config.options import DEBUG_OPTION_FIELDS, normalize_choice, type_name
from fusegen.config.toml import ConfigError

_BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False}


def did_you_mean(name: str, known: list[str] | set[str] | tuple[str, ...]) -> str:
    """``"; did you mean 'x'?"`` for the closest known name, or ``""``."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
    return f"; did you mean {close[0]!r}?" if close else ""


def convert_flag_value(name: str, text: str | None, source: str) -> Any:
    """Convert the string form of an honoured flag's value to its typed value.

    Args:
        name: an honoured XLA flag name (a :class:`DebugOptions` field).
        text: the text after ``=``; None for a bare ``--name`` (true for bools).
        source: where the text came from, for the error (``XLA_FLAGS``, ``--xla-flag``).

    Raises:
        ConfigError: ``SOURCE: --NAME=VALUE: expected TYPE, got 'VALUE'`` (or the allowed values).
    """
    meta = DEBUG_OPTION_FIELDS[name].metadata
    t = meta["type"]
    shown = f"--{name}" if text is None else f"--{name}={text}"
    if t is bool:
        if text is None:
            return True
        if text in _BOOL_WORDS:
            return _BOOL_WORDS[text]
        raise ConfigError(f"{shown}: expected bool (true or false), got {text!r}", source)
    if text is None:
        raise ConfigError(f"--{name}: expected {type_name(t)} value as --{name}=VALUE", source)
    if t is int:
        try:
            return int(text.strip(), 10)
        except ValueError:
            raise ConfigError(f"{shown}: expected int, got {text!r}", source) from None
    if t is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{shown}: expected float, got {text!r}", source) from None
    value = text
    if meta.get("choices"):
        value = normalize_choice(name, text)
        if value not in meta["choices"]:
            raise ConfigError(f"{shown}: expected one of {', '.join(meta['choices'])}, got {text!r}", source)
    return value


@attrs.define
class ParsedFlags:
    """Result of :func:`parse_xla_flags`.

    Attributes:
        values: honoured flag name -> typed value (the last occurrence wins, as in XLA).
        warnings: one line per flag that was ignored.
    """

    values: dict[str, Any] = attrs.field(factory=dict)
    warnings: list[str] = attrs.field(factory=list)


def parse_xla_flags(text: str, source: str = "XLA_FLAGS") -> ParsedFlags:
    """Parse an ``XLA_FLAGS`` string such as ``"--xla_gpu_autotune_level=0 --xla_gpu_enable_triton_gemm=false"``.

    Tokens split on whitespace; double or single quotes group a value with spaces (``--x="a b"``).

    Returns:
        ParsedFlags: honoured flags typed by their :class:`DebugOptions` field, and warnings for flags fusegen
        does not honour (``--xla_gpu_enable_pdl`` is a real XLA flag, but fusegen has nothing to do with it).

    Raises:
        ConfigError: unbalanced quotes, a token that is not ``--name[=value]``, or a bad value of an honoured
        flag (message names the flag and the expected type).
    """
    out = ParsedFlags()
    try:
        tokens = shlex.split(text, comments=False, posix=True)
    except ValueError as e:
        raise ConfigError(f"cannot split flags: {e}", source) from None
    for tok in tokens:
        if not tok.startswith("--") or len(tok) == 2:
            raise ConfigError(
                f"unexpected {tok!r}: XLA flags are written --name=value (a value cannot follow after a space)",
                source)
        body = tok[2:]
        name, eq, val = body.partition("=")
        if name not in DEBUG_OPTION_FIELDS:
            out.warnings.append(
                f"{source}: --{name} is not honoured by fusegen; ignored{did_you_mean(name, DEBUG_OPTION_FIELDS)}")
            continue
        out.values[name] = convert_flag_value(name, val if eq else None, source)
    return out


def parse_cli_flags(items: list[str] | tuple[str, ...] | dict[str, Any] | None) -> dict[str, Any]:
    """Parse ``--xla-flag NAME=VALUE`` command-line overrides (``NAME`` alone sets a bool flag true).

    Accepts a list of ``NAME=VALUE`` strings (a leading ``--`` is allowed) or a dict of NAME -> value (string
    values are converted as in ``XLA_FLAGS``; typed values are kept).

    Raises:
        ConfigError: an unknown flag name (with a did-you-mean) or a bad value; the source is ``--xla-flag``.
    """
    if not items:
        return {}
    src = "--xla-flag"
    pairs: list[tuple[str, Any, bool]] = []
    if isinstance(items, dict):
        pairs = [(k, v, True) for k, v in items.items()]
    else:
        for item in items:
            name, eq, val = item.removeprefix("--").partition("=")
            pairs.append((name, val if eq else None, False))
    out: dict[str, Any] = {}
    for name, val, from_dict in pairs:
        if name not in DEBUG_OPTION_FIELDS:
            raise ConfigError(f"unknown XLA flag {name!r}{did_you_mean(name, DEBUG_OPTION_FIELDS)}", src)
        if from_dict and not isinstance(val, str) and val is not None:
            from fusegen.config.options import check_value

            ok, conv = check_value(val, DEBUG_OPTION_FIELDS[name].metadata["type"])
            if not ok:
                t = type_name(DEBUG_OPTION_FIELDS[name].metadata["type"])
                raise ConfigError(f"{name}: expected {t}, got {type(val).__name__}", src)
            out[name] = conv
        else:
            out[name] = convert_flag_value(name, val, src)
    return out
