"""The tests' own layout: test files live in a layer's folder, and every folder is a package.

Packages are what let pytest name each test module by its dotted path (``tests.core.test_x``), so
two files with the same basename in different folders cannot collide, and what let tests import
their helpers by absolute name (``tests.support…``) with no ``sys.path`` edits.
"""

from __future__ import annotations

from tests.support.paths import FIXTURES, TESTS

LAYERS = {"core", "tools", "hosts", "reliability", "security", "docs"}


def _python_folders() -> set[str]:
    return {
        str(p.parent.relative_to(TESTS))
        for p in TESTS.rglob("*.py")
        if FIXTURES not in p.parents and "__pycache__" not in p.parts
    }


def test_every_folder_of_python_files_is_a_package() -> None:
    folders = _python_folders()
    assert {".", "core", "tools", "hosts/cli", "support"} <= folders  # the scan sees the tree
    assert sorted(f for f in folders if not (TESTS / f / "__init__.py").is_file()) == []


def test_every_test_file_is_in_a_layer_folder() -> None:
    misplaced = [
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("test_*.py")
        if FIXTURES not in p.parents and p.relative_to(TESTS).parts[0] not in LAYERS
    ]
    assert misplaced == []
