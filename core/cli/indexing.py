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
    from fusegen.indexing import IndexingMapParseError, parse_indexing_map

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
            m = m.compose(maps[1])
        if simplify_map:
            m = m.simplify()
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
def indexing(module: str | None, map_text: str | None, simplify_map: bool, compose_with: str | None,
             as_json: bool) -> None:
    """Indexing maps: parse, simplify and compose them as XLA does (--map)."""
    if map_text is None:
        if module is None:
            fail("indexing: give --map TEXT (or a MODULE.hlo for the analysis modes)")
        fail("indexing: the MODULE.hlo analysis modes are not available in this build; use --map")
    if module is not None:
        fail("indexing: --map takes no MODULE argument")
    out = run_map_mode(map_text, simplify_map, compose_with)
    click.echo(json.dumps(out) if as_json else out["map"])
