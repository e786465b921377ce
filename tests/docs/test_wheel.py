"""The package a release publishes works: a wheel built from the repository, installed into a
fresh virtualenv, runs ``shipagent --version`` and creates a project from its packaged files.

The wheel is built the way the release workflow's ``python -m build`` builds it (the hatchling
backend, in an isolated build environment). To stay within tens of seconds and off the network
for shipagent's own dependencies, the fresh virtualenv sees this interpreter's installed
dependencies through a ``.pth`` line — but shipagent itself only from the wheel: nothing of the
working tree is on its path (no ``PYTHONPATH``, no editable install), which the test checks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support.paths import ROOT


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)], out)
    (built,) = out.glob("shipagent-*.whl")
    return built


def test_the_wheel_holds_the_package_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "shipagent/scaffold/ship.json",
        "shipagent/prompts/default.md",
        "shipagent/hosts/serve/static/index.html",
        "shipagent/_data/o200k_base.tiktoken",
    ):
        assert needed in names
    assert not any(n.startswith(("tests/", "docs/", "bench/")) for n in names)


def test_the_installed_wheel_runs_in_a_fresh_virtualenv(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet", str(wheel)],
        tmp_path,
    )
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path
        ).stdout.strip()
    )
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    where = _run([str(python), "-c", "import shipagent; print(shipagent.__file__)"], tmp_path, env).stdout
    assert Path(where.strip()).is_relative_to(site)  # the wheel's copy, not the working tree

    version = _run([str(venv / "bin" / "shipagent"), "--version"], tmp_path, env).stdout
    assert version.startswith("shipagent 0.1.0")

    _run([str(venv / "bin" / "shipagent"), "init", "demo"], tmp_path, env)
    assert (tmp_path / "demo" / "ship.json").is_file() and (tmp_path / "demo" / "Agent.md").is_file()
