"""Third-party plugin packages for tests: built as wheels and pip-installed into a fresh venv.

A plugin under test must be a real distribution, found through its entry point as a user's would be. Each
:class:`PluginVenv` is ``python -m venv --system-site-packages`` made from the running interpreter (the
project's ``.venv``), with a ``.pth`` that adds the ``.venv``'s site-packages (a venv's system site is the
base interpreter's, which lacks fusegen); packages are wheels written from a ``pyproject.toml`` (name,
version, ``py-modules``, entry points; :func:`plugin_venv.build_wheel`) and installed by pip, offline, without
a build backend: the ``.venv``'s setuptools predates the built-in ``bdist_wheel``, and there is no network.
Unlike :mod:`plugin_venv` (one venv with every package of ``tests/plugin_packages``), a test installs here the
projects it writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from plugin_venv import build_wheel  # the wheel of a plain-module project


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
        wheel = build_wheel(project, _mkdir(project.parent / "wheels"))
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


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p
