"""``fusegen report`` pages opened in headless Chromium: drawn, complete, without errors or network.

Renders ``gpt12.h200_opt.hlo`` (183 fusions; without ``--run``: the interpreter would take many minutes, and
without the sm_90 compile to keep the test short) and ``gpu_mlp_bf16.default.h100_opt.hlo`` tuned (the CPU's
cost-model top 4: three Triton tilings and the host backend) and run, each with an empty ``PATH`` (no
Graphviz: the page lays its graph out with the Graphviz-in-WebAssembly it embeds). Each page must log no
console error, request nothing from the network, draw the graph (one SVG node per graph node, each fusion
node linking to its card, every label inside its box) and its plotly charts (SVG), and hold one card per
fusion; on gpt12 the graph's search finds nodes by name and a card's link finds its node. Screenshots go
to the test's tmp dir; ``FUSEGEN_UPDATE_SCREENSHOTS=1`` also writes them to ``docs/`` (the README's pictures).

Needs Debian's ``chromium`` (``make test`` installs it as root) and the ``playwright`` package (test extra),
which drives that browser; no browser is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, corpus_path

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (test extra) is not installed")
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (Debian: apt-get install chromium; make test "
                                                          "installs it when run as root)")
DOCS = REPO / "docs"


def _report(module: Path, out: Path, *flags: str) -> dict:
    """``fusegen report`` with an empty ``PATH`` (no Graphviz, nothing else either); its ``--json-data``."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["PATH"] = str(out.parent / "empty-path")
    os.makedirs(env["PATH"], exist_ok=True)
    data = out.with_suffix(".json")
    p = subprocess.run([sys.executable, "-m", "fusegen.cli", "report", str(module), "-o", str(out),
                        "--json-data", str(data), *flags], capture_output=True, text=True, env=env, timeout=900,
                       cwd=out.parent)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(data.read_text())


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def _open(browser, html: Path, height: int = 1000):
    """The loaded page plus the console errors and network requests it made."""
    page = browser.new_page(viewport={"width": 1400, "height": height})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r):
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            requests.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(html.as_uri())
    page.wait_for_function("document.querySelectorAll('#chart-kinds .main-svg').length > 0", timeout=60_000)
    page.wait_for_function("document.body.dataset.graphs === 'drawn'", timeout=60_000)  # Graphviz laid them out
    return page, errors, requests


def _check_page(page, doc: dict) -> None:
    fusions = [f for m in doc["modules"] for f in m["fusions"]]
    cards = page.eval_on_selector_all("article.card", "els => els.map(e => e.id)")
    assert sorted(cards) == sorted(f["card"] for f in fusions) and len(set(cards)) == len(cards)
    n_nodes = sum(len(m["graph"]["nodes"]) for m in doc["modules"])
    assert page.locator(".graph-wrap svg g.node").count() == n_nodes
    links = set(page.eval_on_selector_all(".graph-wrap svg g.node a",
                                          "els => els.map(e => e.getAttribute('xlink:href') || e.getAttribute('href'))"))
    assert {"#" + f["card"] for f in fusions} <= links
    assert page.locator(".graph-wrap svg g.edge").count() == sum(len(m["graph"]["edges"]) for m in doc["modules"]) + \
        sum(len(m["graph"]["clusters"]) for m in doc["modules"])
    assert page.locator(".graph-wrap p.bad, .graph-wrap .graph-wait").count() == 0  # no layout error, none left
    # readable: every label inside its box (the page squeezes a label where the font is wider than Graphviz's
    # estimate), and the boxes do not overlap
    spill = page.evaluate("""() => {
      const out = [];
      document.querySelectorAll('.graph-wrap svg g.node').forEach(n => {
        const box = n.querySelector('path, polygon, ellipse').getBBox();
        n.querySelectorAll('text').forEach(t => {
          const b = t.getBBox();
          if (b.x < box.x - 1 || b.x + b.width > box.x + box.width + 1) { out.push(t.textContent); }
        });
      });
      document.querySelectorAll('.graph-wrap svg g.cluster').forEach(c => {
        const box = c.querySelector('path, polygon').getBBox(), b = c.querySelector('text').getBBox();
        if (b.x < box.x - 1 || b.x + b.width > box.x + box.width + 1) { out.push(c.querySelector('text').textContent); }
      });
      return out; }""")
    assert spill == []
    overlaps = page.evaluate("""() => {
      const boxes = [...document.querySelectorAll('.graph-wrap svg g.node')].map(n => n.getBoundingClientRect());
      let k = 0;
      for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
        const a = boxes[i], b = boxes[j];
        if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1) { k++; }
      }
      return k; }""")
    assert overlaps == 0
    # plotly drew the summary chart: one bar segment per kind and backend
    table = doc["summary"]["by_kind_backend"]
    bars = len(table) * len({b for row in table.values() for b in row})
    assert page.locator("#chart-kinds .main-svg .barlayer .point").count() == bars


def _shot(target, tmp_path: Path, name: str, **kw) -> None:
    """Screenshot a page or one element of it; ``FUSEGEN_UPDATE_SCREENSHOTS=1`` also copies it into docs/."""
    path = tmp_path / name
    target.screenshot(path=str(path), **kw)
    assert path.stat().st_size > 20_000  # a drawn page, not a blank one
    if os.environ.get("FUSEGEN_UPDATE_SCREENSHOTS", "") not in ("", "0"):
        shutil.copyfile(path, DOCS / name)


def test_gpt12_report_in_chromium(browser, tmp_path):
    doc = _report(corpus_path("jax", "gpt12.h200_opt.hlo"), tmp_path / "gpt12.html", "--no-compile")
    assert doc["summary"]["fusions"] == 183
    page, errors, requests = _open(browser, tmp_path / "gpt12.html")
    assert errors == [] and requests == []
    _check_page(page, doc)
    # a node of the graph takes the reader to its card
    first = doc["modules"][0]["fusions"][0]["name"]
    page.locator(f".graph-wrap svg g.node a[*|href='#card-{first}']").first.click()
    assert page.evaluate("location.hash") == f"#card-{first}"
    # the filter keeps only matching cards
    page.fill("#filter", "ktranspose")
    shown = page.eval_on_selector_all("article.card", "els => els.filter(e => e.style.display !== 'none').length")
    assert shown == doc["summary"]["by_kind"]["kTranspose"]
    page.fill("#filter", "")
    # the graph's search outlines the nodes whose name or kind matches and dims the others
    (m,) = doc["modules"]
    softmax = [f["card"] for f in m["fusions"] if "softmax" in f["name"]]
    page.fill("#graph-search", "softmax")
    hits = page.eval_on_selector_all(".graph-wrap svg g.node.hit", "els => els.map(e => e.id)")
    assert sorted(hits) == sorted("gn-" + c for c in softmax) and len(hits) > 1
    assert page.locator(".graph-wrap svg g.node.dim").count() == len(m["graph"]["nodes"]) - 1 - len(hits)  # not ROOT
    assert page.inner_text("#graph-hits") == f"{len(hits)} nodes · Enter: next"
    assert page.locator(".graph-wrap svg g.node.focus").evaluate("e => e.id") == hits[0]
    page.press("#graph-search", "Enter")
    assert page.locator(".graph-wrap svg g.node.focus").evaluate("e => e.id") == hits[1]
    page.fill("#graph-search", "")
    assert page.locator(".graph-wrap svg g.node.hit, .graph-wrap svg g.node.dim").count() == 0
    # edges are as wide as the bytes they carry: the module's largest edge thickest
    widths = page.eval_on_selector_all(".graph-wrap svg g.edge path", "els => els.map(e => +e.getAttribute('stroke-width') || 1)")
    assert max(widths) == 5 and min(widths) < 1
    # a card's "in the graph" link centres and outlines its node
    last = m["fusions"][-1]["card"]
    page.locator(f"[id='{last}'] a.ingraph").click()
    assert page.locator(".graph-wrap svg g.node.focus").evaluate("e => e.id") == f"gn-{last}"
    assert page.evaluate("location.hash") == f"#gn-{last}"
    page.evaluate("window.scrollTo(0, 0); document.querySelector('.graph-wrap').scrollTo(0, 0)")
    _shot(page, tmp_path, "report-gpt12.png", full_page=False)
    # the graph with a search: two matches outlined (the first centred in red), the rest dimmed
    page.evaluate("document.querySelector('header.top').style.position = 'static'")  # not over the section
    page.fill("#graph-search", "gemm_fusion_dot.5")
    _shot(page.locator("#graph"), tmp_path, "report-gpt12-graph.png")


def test_tuned_mlp_report_in_chromium(browser, tmp_path):
    doc = _report(corpus_path("jax", "gpu_mlp_bf16.default.h100_opt.hlo"), tmp_path / "mlp.html", "--autotune", "--run")
    (t,) = doc["tuning"]
    assert t["instruction"] == "gemm_fusion_dot" and t["winner"]
    # no GPU: every Triton config is ranked by the H200 model's estimate (more than the cost model's top 4)
    assert t["figures"]["kind"] == "estimated" and len(t["candidates"]) > 4
    assert doc["summary"]["status"] == "ok" and all(f["status"] == "ok" for f in doc["modules"][0]["fusions"])
    page, errors, requests = _open(browser, tmp_path / "mlp.html")
    assert errors == [] and requests == []
    _check_page(page, doc)
    chart = page.locator("#chart-tuning-0 .main-svg")
    assert chart.count() > 0
    ran = [c for c in t["candidates"] if c["duration_us"] is not None]
    # one marker per candidate that ran, plus the winner's star and the fastest's ring
    assert page.locator("#chart-tuning-0 .scatterlayer .point").count() == len(ran) + 2
    assert page.locator("#chart-tuning-0 .shapelayer path").count() >= 1  # the shaded window
    # the verdict on the module's outputs (f64 oracle) and each kernel's error budget are on the page
    m = doc["modules"][0]
    if "verdict" in m:
        assert m["status"] == "ok" and [o["status"] for o in m["verdict"]["outputs"]] == ["ok"]
        assert page.locator("table.verdict tr").count() == 1 + len(m["verdict"]["outputs"])
    for f in m["fusions"]:
        if f.get("budget", "-") != "-":
            assert f["budget"] in page.locator(f"#{f['card']}").inner_text()
    # the tuned fusion's card links to its chart, and the chart's title back to the card
    assert doc["modules"][0]["fusions"][0]["tuning"] == {"index": 0, "winner": t["winner"], "step": "tuned"}
    assert page.locator("#card-gemm_fusion_dot a[href='#tuning-0']").inner_text() == t["winner"]
    assert page.locator("#tuning-0 h3 a[href='#card-gemm_fusion_dot']").count() == 1
    page.evaluate("window.scrollTo(0, 0)")
    _shot(page, tmp_path, "report-mlp-tuned.png", full_page=True)


def test_recorded_tuning_shows_wrong_results_and_the_tie_break(browser, tmp_path):
    """Records (as ``run --autotune --record`` writes them): XLA's clustering case and a tie-break."""
    from tuning_cases import _outputs_for

    case = json.loads(corpus_path("xla", "cases", "config_runner__UntrustedVotesForTrustedCluster.json").read_text())
    outs = _outputs_for(case)
    records = tmp_path / "records"
    records.mkdir()
    (records / "a_votes.json").write_text(json.dumps({"instruction": "votes", "window_us": 2, "candidates": [
        {"name": c["n"], "backend": "triton", "trusted": c["trusted"], "duration_us": c["dur_s"] * 1e6,
         "scratch_bytes": 0, "output": outs[c["n"]]} for c in case["cands"]]}))
    (records / "b_tie.json").write_text(json.dumps({"instruction": "tie", "window_us": 2, "check_correctness": False,
                                                     "candidates": [
        {"name": "fast_more_scratch", "duration_us": 10.0, "scratch_bytes": 4096},
        {"name": "close_less_scratch", "duration_us": 11.5, "scratch_bytes": 0},
        {"name": "broken", "duration_us": 0, "scratch_bytes": 0, "failure": "COMPILATION_FAILED",
         "message": "out of shared memory"}]}))
    doc = _report(corpus_path("jax", "gpu_mlp_bf16.default.h100_opt.hlo"), tmp_path / "rec.html", "--no-compile",
                  "--record", str(records))
    votes, tie = doc["tuning"]
    page, errors, requests = _open(browser, tmp_path / "rec.html")
    assert errors == [] and requests == []
    _check_page(page, doc)
    panels = page.locator("#tuning .panel.tuning")
    assert panels.count() == 2
    listed = panels.nth(0).locator("ul.failures li").all_inner_texts()
    assert sorted(x.split(":")[0] for x in listed) == sorted(f["name"] for f in votes["failures"])
    assert all("WRONG RESULTS" in x for x in listed) and len(listed) == 2
    assert panels.nth(1).locator(".sentence").inner_text() == tie["tie_break_sentence"]
    assert "broken: COMPILATION FAILED: out of shared memory" in panels.nth(1).locator("ul.failures").inner_text()
    # every candidate that ran is a marker (WRONG RESULTS ones crossed), plus the winner and fastest overlays
    assert page.locator("#chart-tuning-0 .scatterlayer .point").count() == 4 + 2
    assert page.locator("#chart-tuning-1 .scatterlayer .point").count() == 2 + 2
    panels.nth(1).scroll_into_view_if_needed()
    _shot(panels.nth(1), tmp_path, "report-tie-break.png")


def test_a_file_of_several_modules_keeps_every_card(browser, tmp_path):
    """XLA's tests put several modules in one file (``// -----``); fusion names repeat across them."""
    doc = _report(corpus_path("xla", "modules", "backends__gpu__tests__kernel_reuse.hlo"), tmp_path / "multi.html",
                  "--no-compile")
    names = [f["name"] for m in doc["modules"] for f in m["fusions"]]
    assert len(doc["modules"]) > 1 and len(set(names)) < len(names)
    page, errors, requests = _open(browser, tmp_path / "multi.html")
    assert errors == [] and requests == []
    _check_page(page, doc)
    assert page.locator(".graph-wrap svg").count() == len(doc["modules"])
