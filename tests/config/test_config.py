"""Configuration: fusegen.toml / [tool.fusegen], XLA_FLAGS, --xla-flag, precedence, validation, ``config show``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

import fusegen.cli.config as cli_config
from fusegen.config.loader import find_config_file, load_config
from fusegen.config.options import DEBUG_OPTION_FIELDS, ConfigOption, DebugOptions
from fusegen.config.toml import ConfigError, read_toml, scan_key_lines
from fusegen.config.xla_flags import parse_cli_flags, parse_xla_flags
from fusegen.plugin_manager import PluginManager, hookimpl
from fusegen.registry import HloPass


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def line_of(path: Path, needle: str) -> int:
    """1-based line of the first line containing ``needle`` (so tests do not hard-code line numbers)."""
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


class GemmTunerPlugin:
    """A test plugin declaring typed keys and a pass."""

    @hookimpl
    def fusegen_config_options(self):
        return [
            ConfigOption("max_configs", int, 16, "Most configs to try."),
            ConfigOption("rtol", float, 0.05, "Tolerance."),
            ConfigOption("mode", str, "fast", "Mode.", choices=("fast", "exhaustive")),
            ConfigOption("block_sizes", list[int], [16, 32], "Block sizes."),
        ]

    @hookimpl
    def fusegen_passes(self):
        return [HloPass("gemm-fusion", lambda m, o: False, options=[ConfigOption("any", bool, False, "Any dot.")]),
                HloPass("gemm-rewriter", lambda m, o: False)]


@pytest.fixture
def pm() -> PluginManager:
    return PluginManager(autoload=False, extra_plugins=[("gemm_tuner", GemmTunerPlugin())])


@pytest.fixture
def cli(monkeypatch, pm, tmp_path):
    """Run ``fusegen config ...`` in tmp_path with the test plugin manager; returns (exit_code, stdout, stderr)."""
    monkeypatch.setattr(cli_config, "_plugin_manager", lambda: pm)
    monkeypatch.chdir(tmp_path)

    def run(*args, env=None):
        env = {"XLA_FLAGS": "", **(env or {})}
        r = CliRunner().invoke(cli_config.config, list(args), env=env, catch_exceptions=False)
        return r.exit_code, r.stdout, r.stderr

    return run


def show_json(run, *args, env=None) -> dict:
    code, out, err = run("show", "--json", *args, env=env)
    assert code == 0, err
    return json.loads(out)["options"]


# ---------------------------------------------------------------------------------------------------------------
# Precedence: cli > env > file > default, as reported by `config show`

PRECEDENCE_TOML = """
    [debug_options]
    xla_gpu_autotune_level = 2
    xla_gpu_enable_triton_gemm = false
    xla_gpu_autotune_gemm_rtol = 0.5
"""


def test_precedence_each_source_shown(cli, tmp_path):
    f = write(tmp_path / "fusegen.toml", PRECEDENCE_TOML)
    env = {"XLA_FLAGS": "--xla_gpu_autotune_level=3 --xla_gpu_autotune_gemm_rtol=0.25"}
    opts = show_json(cli, "--xla-flag", "xla_gpu_autotune_level=1", env=env)
    lvl = opts["debug_options.xla_gpu_autotune_level"]
    assert lvl == {"value": 1, "source": "cli"}
    assert opts["debug_options.xla_gpu_autotune_gemm_rtol"] == {"value": 0.25, "source": "env:XLA_FLAGS"}
    assert opts["debug_options.xla_gpu_enable_triton_gemm"] == {
        "value": False, "source": f"file:{f.resolve()}:{line_of(f, 'xla_gpu_enable_triton_gemm')}"}
    assert opts["debug_options.xla_gpu_redzone_padding_bytes"] == {"value": 8 * 1024 * 1024, "source": "default"}


@pytest.mark.parametrize("layers,value,source", [
    (("file", "env", "cli"), 1, "cli"),
    (("file", "env"), 3, "env:XLA_FLAGS"),
    (("file",), 2, "file"),
    ((), 4, "default"),
])
def test_precedence_layers(cli, tmp_path, layers, value, source):
    if "file" in layers:
        f = write(tmp_path / "fusegen.toml", PRECEDENCE_TOML)
        source = source.replace("file", f"file:{f.resolve()}:{line_of(f, 'xla_gpu_autotune_level')}")
    env = {"XLA_FLAGS": "--xla_gpu_autotune_level=3"} if "env" in layers else {}
    args = ["--xla-flag", "xla_gpu_autotune_level=1"] if "cli" in layers else []
    opts = show_json(cli, *args, env=env)
    assert opts["debug_options.xla_gpu_autotune_level"] == {"value": value, "source": source}


def test_show_table_lists_values_and_sources(cli, tmp_path):
    write(tmp_path / "fusegen.toml", PRECEDENCE_TOML)
    code, out, err = cli("show", "--xla-flag", "xla_gpu_enable_triton_gemm=true",
                         env={"XLA_FLAGS": "--xla_gpu_autotune_level=0"})
    assert code == 0, err
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:4]]
            for line in out.splitlines() if line.startswith("│")}
    assert rows["debug_options.xla_gpu_enable_triton_gemm"] == ["true", "cli"]
    assert rows["debug_options.xla_gpu_autotune_level"] == ["0", "env:XLA_FLAGS"]
    assert rows["debug_options.xla_gpu_experimental_autotune_cache_mode"] == ["UPDATE", "default"]
    assert rows["plugins.gemm_tuner.max_configs"] == ["16", "default"]
    assert "fusegen.toml" in out  # the title names the file read


def test_triton_gemm_false_from_file_and_from_env(tmp_path):
    """The issue's example: the flag in fusegen.toml and in XLA_FLAGS gives the same resolved value."""
    f = write(tmp_path / "proj" / "fusegen.toml", "[debug_options]\nxla_gpu_enable_triton_gemm = false\n")
    bare = tmp_path / "bare"
    bare.mkdir()
    from_file = load_config(cwd=f.parent, env={})
    from_env = load_config(cwd=bare, env={"XLA_FLAGS": "--xla_gpu_enable_triton_gemm=false"})
    assert from_file.debug_options.xla_gpu_enable_triton_gemm is False
    assert from_env.debug_options.xla_gpu_enable_triton_gemm is False
    assert from_file.source_of("xla_gpu_enable_triton_gemm") == f"file:{f.resolve()}:2"
    assert from_env.source_of("xla_gpu_enable_triton_gemm") == "env:XLA_FLAGS"
    assert load_config(cwd=bare, env={}).debug_options.xla_gpu_enable_triton_gemm is True


# ---------------------------------------------------------------------------------------------------------------
# Finding the file


def test_pyproject_tool_fusegen_found_from_subdirectory(tmp_path):
    pp = write(tmp_path / "pyproject.toml", """
        [project]
        name = "x"

        [tool.fusegen.debug_options]
        xla_gpu_autotune_level = 0

        [tool.fusegen.device]
        name = "h200"
    """)
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    cfg = load_config(cwd=sub, env={})
    assert cfg.config_file == pp.resolve()
    assert cfg.debug_options.xla_gpu_autotune_level == 0
    assert cfg.sources["debug_options.xla_gpu_autotune_level"] == f"file:{pp.resolve()}:{line_of(pp, 'autotune_level')}"
    assert cfg.sources["device.name"] == f"file:{pp.resolve()}:{line_of(pp, 'name = ' + chr(34) + 'h200')}"


def test_pyproject_tool_fusegen_errors_name_the_prefixed_table(tmp_path):
    pp = write(tmp_path / "pyproject.toml", """
        [tool.fusegen.debug_options]
        xla_gpu_autotun_level = 0
    """)
    with pytest.raises(ConfigError) as e:
        load_config(config_path=pp, env={})
    assert str(e.value) == (f"{pp}:2: unknown key 'xla_gpu_autotun_level' in [tool.fusegen.debug_options]; "
                            "did you mean 'xla_gpu_autotune_level'?")


def test_pyproject_without_tool_fusegen_is_skipped(tmp_path):
    write(tmp_path / "fusegen.toml", "[debug_options]\nxla_gpu_autotune_level = 1\n")
    write(tmp_path / "proj" / "pyproject.toml", "[project]\nname = 'x'\n")
    cfg = load_config(cwd=tmp_path / "proj", env={})
    assert cfg.config_file == (tmp_path / "fusegen.toml").resolve()
    assert cfg.debug_options.xla_gpu_autotune_level == 1


def test_closest_wins_and_fusegen_toml_beats_pyproject_in_same_dir(tmp_path):
    write(tmp_path / "fusegen.toml", "[debug_options]\nxla_gpu_autotune_level = 1\n")
    write(tmp_path / "p" / "pyproject.toml", "[tool.fusegen.debug_options]\nxla_gpu_autotune_level = 2\n")
    assert load_config(cwd=tmp_path / "p", env={}).debug_options.xla_gpu_autotune_level == 2
    write(tmp_path / "p" / "fusegen.toml", "[debug_options]\nxla_gpu_autotune_level = 3\n")
    cfg = load_config(cwd=tmp_path / "p", env={})
    assert cfg.debug_options.xla_gpu_autotune_level == 3
    assert any("[tool.fusegen] ignored" in w for w in cfg.warnings)


def test_explicit_config_beats_search_and_missing_file_is_an_error(tmp_path, cli):
    write(tmp_path / "fusegen.toml", "[debug_options]\nxla_gpu_autotune_level = 1\n")
    other = write(tmp_path / "elsewhere" / "mine.toml", "[debug_options]\nxla_gpu_autotune_level = 5\n")
    opts = show_json(cli, "--config", str(other))
    assert opts["debug_options.xla_gpu_autotune_level"] == {"value": 5, "source": f"file:{other}:2"}
    code, out, err = cli("show", "--config", str(tmp_path / "absent.toml"))
    assert code == 2
    assert err.strip() == f"fusegen: error: {tmp_path / 'absent.toml'}: config file not found"


def test_no_config_file_gives_xla_defaults(tmp_path):
    cfg = load_config(cwd=tmp_path, env={})
    assert cfg.config_file is None
    assert cfg.debug_options == DebugOptions()
    assert all(s == "default" for s in cfg.sources.values())


# ---------------------------------------------------------------------------------------------------------------
# Bad configs: each message


def test_unknown_debug_option_did_you_mean_with_line(tmp_path):
    f = write(tmp_path / "fusegen.toml", """
        # tuning
        [debug_options]
        xla_gpu_enable_triton_gemm = false
        xla_gpu_autotun_level = 0
    """)
    with pytest.raises(ConfigError) as e:
        load_config(cwd=tmp_path, env={})
    assert str(e.value) == (f"{f.resolve()}:4: unknown key 'xla_gpu_autotun_level' in [debug_options]; "
                            "did you mean 'xla_gpu_autotune_level'?")
    assert e.value.line == 4


def test_unknown_top_level_table(tmp_path):
    f = write(tmp_path / "fusegen.toml", "[device]\nname = 'h200'\n\n[pipline]\npasses = []\n")
    with pytest.raises(ConfigError, match=r"fusegen.toml:4: unknown key 'pipline' at top level; "
                                          r"did you mean 'pipeline'\?$"):
        load_config(config_path=f, env={})


@pytest.mark.parametrize("line,expected", [
    ('xla_gpu_autotune_level = "0"', "'xla_gpu_autotune_level' in [debug_options]: expected int, got str ('0')"),
    ("xla_gpu_autotune_level = true", "'xla_gpu_autotune_level' in [debug_options]: expected int, got bool (True)"),
    ("xla_gpu_enable_triton_gemm = 0", "'xla_gpu_enable_triton_gemm' in [debug_options]: expected bool, got int (0)"),
    ('xla_gpu_autotune_gemm_rtol = "x"', "'xla_gpu_autotune_gemm_rtol' in [debug_options]: expected float, got str"),
    ('xla_gpu_experimental_autotune_cache_mode = "READONLY"',
     "expected one of UPDATE, READ, WRITE_ONLY, got 'READONLY'"),
])
def test_wrong_type_names_expected_type(tmp_path, line, expected):
    f = write(tmp_path / "fusegen.toml", f"[debug_options]\n{line}\n")
    with pytest.raises(ConfigError) as e:
        load_config(config_path=f, env={})
    assert str(e.value).startswith(f"{f}:2: ")
    assert expected in str(e.value)


def test_float_option_accepts_int_and_enum_alias(tmp_path):
    f = write(tmp_path / "fusegen.toml", """
        [debug_options]
        xla_gpu_autotune_gemm_rtol = 1
        xla_gpu_experimental_autotune_cache_mode = "AUTOTUNE_CACHE_MODE_READ"
    """)
    d = load_config(config_path=f, env={}).debug_options
    assert d.xla_gpu_autotune_gemm_rtol == 1.0 and isinstance(d.xla_gpu_autotune_gemm_rtol, float)
    assert d.xla_gpu_experimental_autotune_cache_mode == "READ"


def test_unknown_pass_lists_known_passes(tmp_path, pm):
    f = write(tmp_path / "fusegen.toml", """
        [pipeline]
        passes = [
            "gemm-fusion",
            "gemm-rewritter",
        ]
    """)
    with pytest.raises(ConfigError) as e:
        load_config(config_path=f, env={}, pm=pm)
    assert str(e.value) == (f"{f}:2: unknown pass 'gemm-rewritter' in [pipeline]; did you mean 'gemm-rewriter'?; "
                            "known passes: dot-decomposer, fusion, gemm-fusion, gemm-rewriter")


def test_pipeline_passes_and_pass_options(tmp_path, pm):
    f = write(tmp_path / "fusegen.toml", """
        [pipeline]
        passes = ["gemm-rewriter", "gemm-fusion"]

        [pipeline.options.gemm-fusion]
        any = true
    """)
    cfg = load_config(config_path=f, env={}, pm=pm)
    assert cfg.pipeline.passes == ["gemm-rewriter", "gemm-fusion"]
    assert cfg.pipeline.options == {"gemm-fusion": {"any": True}}
    assert cfg.sources["pipeline.options.gemm-fusion.any"] == f"file:{f}:5"
    bad = write(tmp_path / "bad.toml", "[pipeline.options.fusoin]\nx = 1\n")
    with pytest.raises(ConfigError, match=r"bad.toml:1: unknown pass 'fusoin' in \[pipeline\]"):
        load_config(config_path=bad, env={}, known_passes={"fusion"})
    # keys are checked against what each pass declares (HloPass.options)
    bad = write(tmp_path / "bad2.toml", "[pipeline.options.gemm-fusion]\nanny = true\n")
    with pytest.raises(ConfigError, match=r"bad2.toml:2: unknown key 'anny' in \[pipeline.options.gemm-fusion\]; "
                                          r"did you mean 'any'\?"):
        load_config(config_path=bad, env={}, pm=pm)
    bad = write(tmp_path / "bad3.toml", "[pipeline.options.gemm-fusion]\nany = 1\n")
    with pytest.raises(ConfigError, match=r"bad3.toml:2: 'any' in \[pipeline.options.gemm-fusion\]: expected bool"):
        load_config(config_path=bad, env={}, pm=pm)
    bad = write(tmp_path / "bad4.toml", "[pipeline.options.gemm-rewriter]\nepilogues = true\n")
    with pytest.raises(ConfigError, match=r"pass 'gemm-rewriter' declares no options"):
        load_config(config_path=bad, env={}, pm=pm)


def test_absent_plugin_table_is_a_warning(tmp_path, pm):
    f = write(tmp_path / "fusegen.toml", """
        [plugins]
        disable = ["gemm_tuner"]

        [plugins.cutlass]
        tile = 128
    """)
    cfg = load_config(config_path=f, env={}, pm=pm)
    assert cfg.warnings == (f"{f}:4: [plugins.cutlass] configures plugin 'cutlass', which is not installed; ignored",)
    assert cfg.plugins.disable == ["gemm_tuner"]
    assert "cutlass" not in cfg.plugins.settings
    with pytest.raises(ConfigError, match="not installed; ignored .strict"):
        load_config(config_path=f, env={}, pm=pm, strict=True)


def test_absent_plugin_warning_in_config_show(cli, tmp_path):
    write(tmp_path / "fusegen.toml", "[plugins.cutlass]\ntile = 128\n")
    code, out, err = cli("show")
    assert code == 0
    assert "fusegen: warning: " in err and "[plugins.cutlass] configures plugin 'cutlass'" in err


def test_plugin_declared_options_typed_and_sourced(tmp_path, pm):
    f = write(tmp_path / "fusegen.toml", """
        [plugins.gemm_tuner]
        max_configs = 4
        mode = "exhaustive"
    """)
    cfg = load_config(config_path=f, env={}, pm=pm)
    assert cfg.plugin_settings("gemm_tuner") == {"max_configs": 4, "rtol": 0.05, "mode": "exhaustive",
                                                 "block_sizes": [16, 32]}
    assert cfg.sources["plugins.gemm_tuner.max_configs"] == f"file:{f}:2"
    assert cfg.sources["plugins.gemm_tuner.rtol"] == "default"


@pytest.mark.parametrize("line,expected", [
    ("max_config = 4", "2: unknown key 'max_config' in [plugins.gemm_tuner]; did you mean 'max_configs'?"),
    ('max_configs = "4"', "2: 'max_configs' in [plugins.gemm_tuner]: expected int, got str ('4')"),
    ('block_sizes = [16, "x"]', "2: 'block_sizes' in [plugins.gemm_tuner]: expected list[int], got list"),
    ('mode = "slow"', "2: 'mode' in [plugins.gemm_tuner]: expected one of fast, exhaustive, got 'slow'"),
])
def test_plugin_option_errors(tmp_path, pm, line, expected):
    f = write(tmp_path / "fusegen.toml", f"[plugins.gemm_tuner]\n{line}\n")
    with pytest.raises(ConfigError) as e:
        load_config(config_path=f, env={}, pm=pm)
    assert str(e.value).startswith(f"{f}:{expected}")


def test_plugin_options_without_plugin_manager(tmp_path):
    """The loader is testable with plain arguments: plugin_options and installed_plugins."""
    f = write(tmp_path / "fusegen.toml", "[plugins.a]\nk = 1\n\n[plugins.b]\nk = 1\n")
    with pytest.raises(ConfigError, match=r":5: unknown key 'k' in \[plugins.b\]: plugin 'b' declares no options"):
        load_config(config_path=f, env={}, plugin_options={"a": [ConfigOption("k", int, 0)]}, installed_plugins={"a", "b"})
    cfg = load_config(config_path=f, env={}, plugin_options={"a": [ConfigOption("k", int, 0)]})
    assert cfg.plugin_settings("a") == {"k": 1}
    assert len(cfg.warnings) == 1 and "plugin 'b', which is not installed" in cfg.warnings[0]


def test_plugin_table_and_lists_name_plugins_as_pip_does(tmp_path, pm):
    """``[plugins.Gemm-Tuner]`` configures ``gemm_tuner``; enable/disable spellings differ only in ``-``/``_``/case."""
    f = write(tmp_path / "fusegen.toml", """
        [plugins]
        enable = ["Gemm-Tuner"]

        [plugins.gemm-TUNER]
        max_configs = 4
    """)
    cfg = load_config(config_path=f, env={}, pm=pm)
    assert cfg.warnings == ()
    assert cfg.plugin_settings("gemm_tuner")["max_configs"] == 4
    assert cfg.plugin_settings("gemm-tuner")["max_configs"] == 4
    assert cfg.sources["plugins.gemm_tuner.max_configs"] == f"file:{f}:5"
    bad = write(tmp_path / "bad.toml", "[plugins.Gemm_Tuner]\nmax_config = 4\n")
    with pytest.raises(ConfigError, match=r"bad.toml:2: unknown key 'max_config' in \[plugins.Gemm_Tuner\]"):
        load_config(config_path=bad, env={}, pm=pm)
    both = write(tmp_path / "both.toml", '[plugins]\nenable = ["in-place-dus"]\ndisable = ["IN_PLACE_DUS"]\n')
    with pytest.raises(ConfigError, match=r"'in-place-dus' both enabled and disabled"):
        load_config(config_path=both, env={})


def test_toml_syntax_error_has_line(tmp_path, cli):
    f = write(tmp_path / "fusegen.toml", """
        [debug_options]
        xla_gpu_autotune_level = 0
        xla_gpu_enable_triton_gemm == false
    """)
    with pytest.raises(ConfigError) as e:
        load_config(cwd=tmp_path, env={})
    assert e.value.line == 3
    assert str(e.value).startswith(f"{f.resolve()}:3: invalid TOML: ")
    code, out, err = cli("show")
    assert code == 2
    assert err.startswith(f"fusegen: error: {f.resolve()}:3: invalid TOML") and err.count("\n") == 1
    assert "Traceback" not in err


def test_unknown_device(tmp_path):
    f = write(tmp_path / "fusegen.toml", '[device]\nname = "h20"\n')
    with pytest.raises(ConfigError) as e:
        load_config(config_path=f, env={})
    assert str(e.value).startswith(f"{f}:2: [device] name: ")
    assert "h20" in str(e.value)


def test_plugins_enable_disable_unknown_name_warns(tmp_path, pm):
    f = write(tmp_path / "fusegen.toml", '[plugins]\nenable = ["gemm_tunr"]\n')
    cfg = load_config(config_path=f, env={}, pm=pm)
    assert cfg.warnings == (f"{f}:2: enable names 'gemm_tunr', which no loaded plugin registers; "
                            "did you mean 'gemm_tuner'?",)
    both = write(tmp_path / "both.toml", '[plugins]\nenable = ["x"]\ndisable = ["x"]\n')
    with pytest.raises(ConfigError, match=r"both.toml:3: 'x' both enabled and disabled in \[plugins\]"):
        load_config(config_path=both, env={})


def test_broken_config_does_not_break_help(tmp_path, monkeypatch):
    write(tmp_path / "fusegen.toml", "[debug_options\nxla = = =\n")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli_config.config, ["show", "--help"])
    assert r.exit_code == 0 and "--xla-flag" in r.output
    from fusegen.cli.main import cli as main_cli

    r = CliRunner().invoke(main_cli, ["--help"])
    assert r.exit_code == 0 and "Usage" in r.output


# ---------------------------------------------------------------------------------------------------------------
# XLA_FLAGS and --xla-flag parsing


@pytest.mark.parametrize("text,expected", [
    ("--xla_gpu_enable_triton_gemm", True),
    ("--xla_gpu_enable_triton_gemm=true", True),
    ("--xla_gpu_enable_triton_gemm=false", False),
    ("--xla_gpu_enable_triton_gemm=1", True),
    ("--xla_gpu_enable_triton_gemm=0", False),
    ("--xla_gpu_enable_triton_gemm=false --xla_gpu_enable_triton_gemm", True),  # last one wins
])
def test_xla_flags_bool_forms(text, expected):
    assert parse_xla_flags(text).values == {"xla_gpu_enable_triton_gemm": expected}


def test_xla_flags_typed_values_and_unknown_flags():
    p = parse_xla_flags("  --xla_gpu_autotune_level=0\t--xla_gpu_autotune_gemm_rtol=1e-3 "
                        "--xla_gpu_per_fusion_autotune_cache_dir='/tmp/my cache' "
                        "--xla_gpu_experimental_autotune_cache_mode=AUTOTUNE_CACHE_MODE_WRITE_ONLY "
                        "--xla_gpu_enable_pdl=true --xla_gpu_autotune_levle=1")
    assert p.values == {"xla_gpu_autotune_level": 0, "xla_gpu_autotune_gemm_rtol": 1e-3,
                        "xla_gpu_per_fusion_autotune_cache_dir": "/tmp/my cache",
                        "xla_gpu_experimental_autotune_cache_mode": "WRITE_ONLY"}
    assert p.warnings == [
        "XLA_FLAGS: --xla_gpu_enable_pdl is not honoured by fusegen; ignored",
        "XLA_FLAGS: --xla_gpu_autotune_levle is not honoured by fusegen; ignored; "
        "did you mean 'xla_gpu_autotune_level'?",
    ]


@pytest.mark.parametrize("text,message", [
    ("--xla_gpu_enable_triton_gemm=no", "XLA_FLAGS: --xla_gpu_enable_triton_gemm=no: expected bool (true or false), got 'no'"),
    ("--xla_gpu_enable_triton_gemm=True", "XLA_FLAGS: --xla_gpu_enable_triton_gemm=True: expected bool"),
    ("--xla_gpu_autotune_level=high", "XLA_FLAGS: --xla_gpu_autotune_level=high: expected int, got 'high'"),
    ("--xla_gpu_autotune_level", "XLA_FLAGS: --xla_gpu_autotune_level: expected int value"),
    ("--xla_gpu_autotune_gemm_rtol=tight", "XLA_FLAGS: --xla_gpu_autotune_gemm_rtol=tight: expected float"),
    ("--xla_gpu_experimental_autotune_cache_mode=RW", "XLA_FLAGS: --xla_gpu_experimental_autotune_cache_mode=RW: expected one of UPDATE, READ, WRITE_ONLY, got 'RW'"),
    # A bool flag takes no separate value: the bare flag means true, and 'false' is a stray token.
    ("--xla_gpu_enable_triton_gemm false", "XLA_FLAGS: unexpected 'false': XLA flags are written --name=value"),
    ('--xla_gpu_per_fusion_autotune_cache_dir="/tmp', "XLA_FLAGS: cannot split flags"),
])
def test_xla_flags_bad_values(text, message):
    with pytest.raises(ConfigError) as e:
        parse_xla_flags(text)
    assert str(e.value).startswith(message)


def test_xla_flags_error_through_config_show(cli):
    code, out, err = cli("show", env={"XLA_FLAGS": "--xla_gpu_autotune_level=x"})
    assert code == 2
    assert err == "fusegen: error: XLA_FLAGS: --xla_gpu_autotune_level=x: expected int, got 'x'\n"


def test_cli_flags():
    assert parse_cli_flags(["xla_gpu_autotune_level=0", "--xla_gpu_deterministic_ops"]) == {
        "xla_gpu_autotune_level": 0, "xla_gpu_deterministic_ops": True}
    assert parse_cli_flags({"xla_gpu_enable_triton_gemm": False, "xla_gpu_autotune_level": "2"}) == {
        "xla_gpu_enable_triton_gemm": False, "xla_gpu_autotune_level": 2}
    with pytest.raises(ConfigError, match=r"^--xla-flag: unknown XLA flag 'xla_gpu_enable_trition_gemm'; "
                                          r"did you mean 'xla_gpu_enable_triton_gemm'\?$"):
        parse_cli_flags(["xla_gpu_enable_trition_gemm=false"])
    with pytest.raises(ConfigError, match="expected int, got bool"):
        parse_cli_flags({"xla_gpu_autotune_level": True})


# ---------------------------------------------------------------------------------------------------------------
# The model and the line scanner


def test_every_debug_option_documents_type_help_and_xla_source():
    assert len(DEBUG_OPTION_FIELDS) >= 20
    for name, f in DEBUG_OPTION_FIELDS.items():
        assert name.startswith("xla_"), name
        assert f.metadata["help"] and f.metadata["xla_source"], name
        t = f.metadata["type"]
        assert isinstance(f.default, t) and not (t is int and isinstance(f.default, bool)), name
    # Defaults that differ from proto zero values are the easy ones to get wrong (xla-facts §1d, §1e).
    d = DebugOptions()
    assert (d.xla_gpu_autotune_level, d.xla_gpu_autotune_gemm_rtol, d.xla_gpu_redzone_padding_bytes) == (4, 0.1, 1 << 23)
    assert (d.xla_gpu_enable_triton_gemm, d.xla_gpu_triton_gemm_any, d.xla_gpu_cublas_fallback) == (True, True, True)
    assert (d.xla_gpu_gemm_rewrite_size_threshold, d.xla_gpu_cudnn_gemm_max_plans) == (100, 5)
    assert attrs.has(DebugOptions)


def test_scan_key_lines_tables_quoted_keys_and_multiline_values():
    text = textwrap.dedent('''
        top = 1
        [pipeline]
        passes = [
          "a",   # x = 1 inside an array is not a key
          "b",
        ]
        doc = """
        fake = 2
        """
        [plugins."my.plugin"]
        'lit key' = 3
        a.b = { c = 1 }
        [[pipeline.stages]]
        name = "s"
    ''').lstrip("\n")
    lines = scan_key_lines(text)
    assert lines[("top",)] == 1
    assert lines[("pipeline",)] == 2
    assert lines[("pipeline", "passes")] == 3
    assert lines[("pipeline", "doc")] == 7
    assert ("pipeline", "fake") not in lines and ("x",) not in lines
    assert lines[("plugins", "my.plugin")] == 10
    assert lines[("plugins", "my.plugin", "lit key")] == 11
    assert lines[("plugins", "my.plugin", "a", "b")] == 12
    assert lines[("pipeline", "stages", "name")] == 14


def test_read_toml_line_fallback_to_enclosing_key(tmp_path):
    f = write(tmp_path / "x.toml", "[plugins]\ngemm_tuner = { max_configs = \"4\" }\n")
    doc = read_toml(f)
    assert doc.line_of("plugins", "gemm_tuner", "max_configs") == 2
    with pytest.raises(ConfigError, match=r"x.toml:2: 'max_configs' in \[plugins.gemm_tuner\]: expected int"):
        load_config(config_path=f, env={}, plugin_options={"gemm_tuner": [ConfigOption("max_configs", int, 1)]})



def test_find_config_file_reports_prefix(tmp_path):
    pp = write(tmp_path / "pyproject.toml", "[tool.fusegen.device]\nname = 'h200'\n")
    (tmp_path / "sub").mkdir()
    assert find_config_file(tmp_path / "sub") == (pp.resolve(), ("tool", "fusegen"), [])
    own = write(tmp_path / "sub" / "fusegen.toml", "")
    assert find_config_file(tmp_path / "sub") == (own.resolve(), (), [])
