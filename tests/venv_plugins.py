"""Third-party plugin packages for tests: built as wheels and pip-installed into a fresh venv.

A plugin under test must be a real distribution, found through its entry point as a user's would be. Each
:class:`PluginVenv` is ``python -m venv --system-site-packages`` made from the running interpreter (the
project's ``.venv``), with a ``.pth`` that adds the ``.venv``'s site-packages (a venv's system site is the
base interpreter's, which lacks fusegen); packages are wheels written from a ``pyproject.toml`` (name,
version, ``py-modules``, entry points) and installed by pip, offline, without a build backend: the
``.venv``'s setuptools predates the built-in ``bdist_wheel``, and there is no network.
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
import zipfile
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(src: Path, out_dir: Path) -> Path:
    """A pure-Python wheel of the project in ``src`` (its ``pyproject.toml``: ``[project]`` name and version,
    ``[project.entry-points.*]``, ``[tool.setuptools] py-modules``, each module ``src/<module>.py``).

    Raises:
        ValueError: the pyproject lacks a name, a version or ``py-modules``, or a module file is missing.
    """
    meta = tomllib.loads((src / "pyproject.toml").read_text())
    project = meta.get("project", {})
    name, version = project.get("name"), project.get("version")
    modules = meta.get("tool", {}).get("setuptools", {}).get("py-modules", [])
    if not (name and version and modules):
        raise ValueError(f"{src}/pyproject.toml: needs [project] name and version and [tool.setuptools] py-modules")
    norm = name.replace("-", "_")
    info = f"{norm}-{version}.dist-info"
    files: dict[str, bytes] = {}
    for m in modules:
        path = src / f"{m}.py"
        if not path.exists():
            raise ValueError(f"{src}: py-module {m!r} has no file {path.name}")
        files[f"{m}.py"] = path.read_bytes()
    lines = [f"Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    files[f"{info}/METADATA"] = ("\n".join(lines) + "\n").encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: tests/venv_plugins.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    eps = project.get("entry-points", {})
    if eps:
        text = "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in table.items()) + "\n" for g, table in eps.items())
        files[f"{info}/entry_points.txt"] = text.encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{norm}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        record = []
        for n, data in files.items():
            z.writestr(n, data)
            record.append(_record_line(n, data))
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def write_project(dest: Path, name: str, modules: dict[str, str], entry_points: dict[str, dict[str, str]],
                  version: str = "0.1.0") -> Path:
    """Write a plugin project (``pyproject.toml`` + one file per module) into ``dest``; returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for m, text in modules.items():
        (dest / f"{m}.py").write_text(text)
    eps = "".join(f'\n[project.entry-points."{g}"]\n' + "".join(f'{k} = "{v}"\n' for k, v in t.items())
                  for g, t in entry_points.items())
    (dest / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\ndependencies = ["fusegen>=0.1"]\n{eps}\n'
        f'[tool.setuptools]\npy-modules = {json.dumps(list(modules))}\n')
    return dest


class PluginVenv:
    """A venv seeing the project's packages, into which plugin projects are pip-installed.

    Args:
        path: the venv's directory (created).
    """

    def __init__(self, path: Path):
        self.path = path
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
                       check=True, capture_output=True)
        self.python = path / "bin" / "python"
        site = subprocess.run([str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
        dev = sysconfig.get_paths()["purelib"]  # the project's .venv: fusegen (editable), pytest, hypothesis
        Path(site, "_fusegen_dev_site.pth").write_text(f"import site; site.addsitedir({dev!r})\n")

    def install(self, project: Path) -> subprocess.CompletedProcess:
        """``pip install`` the project in ``project`` (as a wheel, no dependencies, offline).

        Raises:
            subprocess.CalledProcessError: pip failed (its output is in the exception).
        """
        wheel = build_wheel(project, project.parent / "wheels")
        return subprocess.run([sys.executable, "-m", "pip", "--python", str(self.python), "install", "--no-deps",
                               "--no-index", "--quiet", str(wheel)], check=True, capture_output=True, text=True)

    def run(self, *args: str, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
        """``<venv>/bin/python ARGS`` with ``env`` added to the environment."""
        return subprocess.run([str(self.python), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})

    def conformance(self, plugin: str, cwd: Path, *extra: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
        """Run the conformance suite on ``plugin`` from ``cwd``; returns the process and its JSON report."""
        report = cwd / f"conformance-{plugin}.json"
        proc = self.run("-m", "pytest", "-p", "fusegen.conformance", "-p", "no:cacheprovider", "--fusegen-plugin",
                        plugin, "--fusegen-report", str(report), "-q", "-rs", *extra, cwd=cwd, env=env)
        data = json.loads(report.read_text()) if report.exists() else {}
        return proc, data
