"""Import paths from before the layers were folders still work, and give the one module."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from shipagent._moved import MOVED, new_name


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_gives_the_module_of_its_new_home(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])


def test_an_old_package_s_submodules_follow_it() -> None:
    import shipagent.hosts.serve._app as new

    old = importlib.import_module("shipagent.serve._app")
    assert old is new  # one module: a monkeypatch on either is seen by both
    assert importlib.import_module("shipagent.serve").create_app is new.create_app
    assert new_name("shipagent.history.logs") == "shipagent.store.logs"  # listed itself
    assert new_name("shipagent.history.placement") == "shipagent.window.placement"  # follows its package
    assert new_name("shipagent.config") is None  # never moved


def test_a_name_that_never_existed_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("shipagent.serve.no_such_module")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("shipagent.no_such_package")


def test_an_old_console_script_still_starts_the_command() -> None:
    # an environment installed before the move runs ``from shipagent.cli import main``
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from shipagent.cli import main; import sys; sys.argv = ['shipagent', '--help']; main()",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout
