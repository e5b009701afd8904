"""A venv with fusegen and the third-party-style plugins of ``tests/plugin_packages`` pip-installed.

Each package is built into a wheel here (a wheel is a zip with a ``.dist-info``: no build backend, no network,
no ``wheel`` package needed) and installed with ``pip install --no-deps --no-index``, so fusegen finds the
plugins exactly as it finds a user's: through their distributions' entry points. The venv reaches this
checkout's fusegen through a ``.pth`` file that adds the test interpreter's site-packages (``venv
--system-site-packages`` would add the *base* interpreter's, where fusegen is not installed).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

PACKAGES = Path(__file__).with_name("plugin_packages")


def build_wheel(src: Path, out: Path) -> Path:
    """A ``py3-none-any`` wheel of the plain-module distribution in ``src`` (its ``pyproject.toml``'s name,
    version, entry points and ``[tool.setuptools] py-modules``)."""
    project = tomllib.loads((src / "pyproject.toml").read_text())
    meta, modules = project["project"], project["tool"]["setuptools"]["py-modules"]
    dist = meta["name"].replace("-", "_")
    info = f"{dist}-{meta['version']}.dist-info"
    eps = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in table.items()) + "\n"
                  for group, table in meta.get("entry-points", {}).items())
    files = {f"{m}.py": (src / f"{m}.py").read_bytes() for m in modules}
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n".encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: fusegen-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/entry_points.txt"] = eps.encode()
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\n".join(record + [f"{info}/RECORD,,"]) + "\n").encode()
    whl = out / f"{dist}-{meta['version']}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return whl


def make_plugin_venv(root: Path) -> Path:
    """Create the venv under ``root`` with every package of :data:`PACKAGES` installed; its python."""
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    here = sysconfig.get_paths()["purelib"]  # fusegen (editable), pip, numpy, triton ...
    (site / "_fusegen_checkout.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    wheels = root / "wheels"
    wheels.mkdir()
    built = [build_wheel(p.parent, wheels) for p in sorted(PACKAGES.glob("*/pyproject.toml"))]
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check",
                    "-q", *map(str, built)], check=True, capture_output=True, text=True)
    return py


def fusegen_in(py: Path, *args: str, dists: str = "", env: dict | None = None, cwd: Path | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess:
    """``fusegen ARGS`` in the venv, autoloading fusegen's own plugins and the distributions ``dists``
    (comma-separated) only, so that nothing else installed changes the result."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("FUSEGEN_") or k == "FUSEGEN_KERNEL_DIR"}
    full["FUSEGEN_AUTOLOAD_DISTRIBUTIONS"] = ",".join(["fusegen", *filter(None, dists.split(","))])
    full.update(env or {})
    return subprocess.run([str(py), "-m", "fusegen.cli", *args], capture_output=True, text=True, env=full,
                          cwd=cwd, timeout=timeout)


def conformance_in(py: Path, plugin: str, cwd: Path, *extra: str, env: dict | None = None,
                   timeout: float = 600) -> tuple[subprocess.CompletedProcess, dict]:
    """``pytest -p fusegen.conformance --fusegen-plugin PLUGIN`` in the venv from ``cwd`` (the suite loads
    fusegen's own plugins and the plugin's distribution only); the process and its JSON report."""
    report = cwd / f"conformance-{plugin}.json"
    full = {k: v for k, v in os.environ.items() if not k.startswith("FUSEGEN_") or k == "FUSEGEN_KERNEL_DIR"}
    full.update(env or {})
    proc = subprocess.run([str(py), "-m", "pytest", "-p", "fusegen.conformance", "-p", "no:cacheprovider",
                           "--fusegen-plugin", plugin, "--fusegen-report", str(report), "-q", "-rs", *extra],
                          capture_output=True, text=True, env=full, cwd=cwd, timeout=timeout)
    return proc, (json.loads(report.read_text()) if report.exists() else {})


if __name__ == "__main__":  # python tests/plugin_venv.py DIR: build the venv by hand
    print(make_plugin_venv(Path(sys.argv[1])))
