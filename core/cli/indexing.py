"""``fusegen indexing``: XLA's indexing maps from the command line.

Map mode (``--map TEXT [--simplify] [--compose TEXT2] [--json]``): parse a map in XLA's text form, optionally
compose it with a second map (``ComposeIndexingMaps(TEXT, TEXT2)``: apply TEXT, then TEXT2) and/or simplify it
(XLA's ``IndexingMap::Simplify``), print it in XLA's text form; ``--json`` gives ``{"map": TEXT, "changed": bool}``
(``changed``: the printed map differs from the input's). A bad map is one line naming the option and the
column, exit 2. The ``MODULE.hlo`` modes (the op-level indexing analysis) hang off the same command.
"""

from __future__ import annotations

import json

import click

from fusegen.cli.common import fail, internal_error


def run_map_mode(text: str, simplify_map: bool, compose_with: str | None) -> dict:
    """The ``--map`` mode's JSON object: ``{"map": TEXT, "changed": bool}``. Exits 2 on a bad map."""
    from fusegen.indexing import IndexingMapParseError, compose_indexing_maps, parse_indexing_map, simplify

    maps = []
    for option, value in (("--map", text), ("--compose", compose_with)):
        if value is None:
            continue
        try:
            maps.append(parse_indexing_map(value))
        except IndexingMapParseError as e:
            fail(f"bad indexing map ({option}), {e}")
    m = maps[0]
    original = str(m)
    try:
        if compose_with is not None:
            if maps[1].num_dims != m.num_results:
                fail(f"cannot compose: --map has {m.num_results} results, --compose has {maps[1].num_dims} "
                     f"dimensions")
            m = compose_indexing_maps(m, maps[1])
        if simplify_map:
            m = simplify(m)[0]
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - one line, exit 3
        internal_error("indexing", exc)
    return {"map": str(m), "changed": str(m) != original}


@click.command("indexing")
@click.argument("module", required=False)
@click.option("--map", "map_text", default=None, help="An indexing map in XLA's text form.")
@click.option("--simplify", "simplify_map", is_flag=True, help="Simplify the map (XLA's IndexingMap::Simplify).")
@click.option("--compose", "compose_with", default=None,
              help="A second map: print ComposeIndexingMaps(MAP, COMPOSE), i.e. apply MAP then COMPOSE.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.option("--instruction", default=None, help="MODULE mode: the instruction analysed (by name).")
@click.option("--fusion", default=None, help="MODULE mode: the fusion analysed (by name).")
@click.option("--output-to-input", "output_to_input", is_flag=True,
              help="Maps from the output (--output-id N, default 0) to each operand.")
@click.option("--input-to-output", "input_to_output", is_flag=True,
              help="Maps from operand --input-id N to each output.")
@click.option("--output-id", "output_id", type=int, default=None, help="Output of a multi-output instruction.")
@click.option("--input-id", "input_id", type=int, default=None, help="Operand for --input-to-output.")
@click.option("--physical-layout", "physical_layout", is_flag=True,
              help="Maps between physical (layout-ordered) indices.")
@click.option("--grouped", is_flag=True, help="Grouped output-to-input maps of the fusion, keyed by instruction.")
@click.option("--coalescing", is_flag=True, help="XLA's read-coalescing analysis of --fusion, per operand.")
@click.option("--device", "device_name", default=None, help="Device preset for --coalescing (default h200).")
@click.pass_context
def indexing(ctx: click.Context, module: str | None, map_text: str | None, simplify_map: bool,
             compose_with: str | None, as_json: bool, instruction: str | None, fusion: str | None,
             output_to_input: bool, input_to_output: bool, output_id: int | None, input_id: int | None,
             physical_layout: bool, grouped: bool, coalescing: bool, device_name: str | None) -> None:
    """Indexing maps: parse, simplify and compose them as XLA does (--map); with MODULE.hlo, the indexing
    analysis of an instruction (--output-to-input / --input-to-output [--physical-layout] [--grouped]) or
    the read-coalescing analysis of a fusion (--coalescing)."""
    if module is not None:
        if map_text is not None:
            fail("indexing: --map takes no MODULE argument")
        from fusegen.cli.indexing_modes import run_module_mode

        try:
            rc = run_module_mode(module, instruction=instruction, fusion=fusion, output_to_input=output_to_input,
                                 input_to_output=input_to_output, output_id=output_id, input_id=input_id,
                                 physical_layout=physical_layout, grouped=grouped, coalescing=coalescing,
                                 as_json=as_json, device_name=device_name)
        except SystemExit:
            raise
        except Exception as exc:  # noqa: BLE001 - one line, exit 3
            internal_error("indexing", exc)
        ctx.exit(rc)
    if map_text is None:
        fail("indexing: give --map TEXT (or a MODULE.hlo for the analysis modes)")
    out = run_map_mode(map_text, simplify_map, compose_with)
    click.echo(json.dumps(out) if as_json else out["map"])
