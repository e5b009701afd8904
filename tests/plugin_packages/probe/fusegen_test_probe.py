"""A plugin with one of every callable, each writing down the context it was handed (``[plugins.probe] log``)."""

import json

import numpy as np

from fusegen.codegen_backend import CodegenBackend, Config
from fusegen.config.options import ConfigOption
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory, ExecutionBackend, HloPass, KindMatcher
from fusegen_plugins.emitters.loop import LoopFusion


def note(callable_name, context, **extra):
    if context is None or not context.settings.get("log"):
        return
    with open(context.settings["log"], "a") as f:
        f.write(json.dumps({"callable": callable_name, "plugin": context.plugin,
                            "device": getattr(context.device, "name", None), "settings": dict(context.settings),
                            **extra}) + "\n")


class ProbeLoopFusion(LoopFusion):
    name = "ProbeLoopFusion"


def match(analysis, context):
    note("matcher", context)
    return None


def create(analysis, context):
    note("factory", context)
    if analysis.fusion.shape.numel < context.settings["min_elements"]:
        return None  # small fusions stay with fusegen's loop emitter
    return ProbeLoopFusion(analysis)


def run_pass(module, options):
    note("pass", options.context, options=dict(options.options))
    return False


def execute(inst, operands, context):
    note("execution backend", context)
    return np.matmul(*operands)  # a plain 2-D dot


class ProbeCodegen(CodegenBackend):
    name = "probe-codegen"
    compiles_in_process = True

    def get_supported_configs(self, instr):
        note("codegen backend", self.context)
        return []

    def compile(self, instr, config):
        raise NotImplementedError

    def apply_config(self, instr, config: Config):
        pass


@hookimpl
def fusegen_config_options():
    return [ConfigOption("log", str, "", "File each callable appends its context to (JSON lines)."),
            ConfigOption("min_elements", int, 0, "Leave kLoop fusions smaller than this to the loop emitter.")]


@hookimpl
def fusegen_fusion_kind_matchers():
    return [KindMatcher(name="probe", rank=50, match=match)]


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="probe", kind="kLoop", rank=50, create=create)]


@hookimpl
def fusegen_passes():
    return [HloPass(name="probe-pass", run=run_pass, options=[ConfigOption("tag", str, "", "Written to the log.")])]


@hookimpl
def fusegen_execution_backends():
    return [ExecutionBackend(name="probe-dot", rank=1, can_execute=lambda inst: inst.opcode == "dot",
                             execute=execute)]


@hookimpl
def fusegen_codegen_backends():
    return [ProbeCodegen()]
