"""Which host paths a sandbox mounts, and how: resolved here, turned into bwrap options by ``_sandbox``.

Split from ``_sandbox`` so each stays small. Everything here touches the file system (resolves
symlinks, lists the project) and runs in a worker thread, except :func:`anchors`, which is pure.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..config import ExecShellPermission

__all__ = ["anchors", "exact_dirs", "hidden_paths", "homes", "tool_dirs", "writable_paths"]

log = logging.getLogger("shipagent.tools")


def homes() -> list[Path]:
    """The user's home directories: ``$HOME`` and the password database's, when they differ."""
    homes = {os.environ.get("HOME", "")}
    with contextlib.suppress(ImportError, KeyError):  # no pwd module, or a uid without an entry
        import pwd

        homes.add(pwd.getpwuid(os.getuid()).pw_dir)
    return [Path(h) for h in homes if h]


def tool_dirs(homes: Sequence[Path]) -> list[Path]:
    """Directories of a hidden home that hold installed tools, to mount back read-only.

    Interpreters and tools often live in the home directory (``~/.pyenv``, ``~/.cargo``,
    ``~/.local``, ``~/bin``). For every ``$PATH`` entry and the running Python's installation under
    a home, its first-level directory is mounted back, so ``python3`` and ``cargo`` still run while
    ``~/.ssh``, ``~/.aws``, ``~/.config`` or ``~/.netrc`` stay hidden.
    """
    candidates = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    candidates += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    found: list[Path] = []
    for raw in candidates:
        for path in {Path(os.path.abspath(raw)), Path(os.path.realpath(raw))}:
            for home in homes:
                if path != home and path.is_relative_to(home):
                    parts = path.relative_to(home).parts
                    if home == Path("/home"):  # a directory of homes: /home/<user>/<tool folder>
                        if len(parts) < 2:
                            continue
                        parts = (f"{parts[0]}/{parts[1]}",)
                    top = home / parts[0]
                    if top not in found and top.exists():
                        found.append(top)
    return found


def exact_dirs(hidden: Sequence[Path]) -> list[Path]:
    """``$PATH`` entries and the running Python's installation inside a hidden ``/tmp`` or ``/run``.

    A virtualenv or a checkout under ``/tmp`` (a CI clone) would vanish behind the private ``/tmp``
    and ``python3`` would stop working in the sandbox. Unlike a home's tool folders, only those exact
    directories come back (read-only), never their neighbours in ``/tmp``.
    """
    candidates = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    candidates += [sys.prefix, sys.exec_prefix]
    found: list[Path] = []
    for raw in candidates:
        path = Path(os.path.realpath(raw))
        if path.is_dir() and path not in found and any(path != h and path.is_relative_to(h) for h in hidden):
            found.append(path)
    return found


def hidden_paths(policy: ExecShellPermission, root: Path) -> tuple[list[Path], list[Path]]:
    """``.env``, ``.env.*``, ``.envrc`` and ``permissions.execShell.hide``: directories, files."""
    candidates = [p for p in root.glob(".env*") if p.name in (".env", ".envrc") or p.name.startswith(".env.")]
    candidates += [root / Path(raw).expanduser() for raw in policy.hide]
    dirs: list[Path] = []
    files: list[Path] = []
    for candidate in candidates:
        if not os.path.lexists(candidate):
            continue
        real = candidate.resolve()
        if real == root or real == Path("/"):
            continue  # hiding the project (or everything) would leave nothing to work on
        if real.is_dir():
            dirs.append(real)
        elif real.exists():
            files.append(real)
    return dirs, files


def writable_paths(policy: ExecShellPermission, root: Path) -> list[Path]:
    """``permissions.execShell.writablePaths`` resolved, without the ones a symlink leads out.

    A path named inside the project is the model's to replace: had ``build`` not existed, a command
    could make it a link to ``/`` and the next command would get the whole host read-write. So a
    path the config names inside the project must still resolve inside it; one that does not is
    left out (read-only, like the rest) and logged. Paths named outside the project are the user's.
    """
    found: list[Path] = []
    for raw in policy.writable_paths:
        named = root / Path(raw).expanduser()
        real = named.resolve()
        if Path(os.path.normpath(named)).is_relative_to(root) and not real.is_relative_to(root):
            log.warning(
                "permissions.execShell.writablePaths: %r leads outside the project through a symlink "
                "(to %s); it stays read-only (name the target itself to make it writable)",
                raw,
                real,
            )
            continue
        if real.is_dir() or real.is_file():  # one that is not there yet is not mounted: bwrap would
            found.append(real)  # follow a link a parallel command makes there before it starts
    return found


def anchors(roots: Sequence[Path], paths: Iterable[Path]) -> list[Path]:
    """The writable directories between the project (or a writable path) and a hidden or protected path.

    Each is bound onto itself, which makes it a mount point, and the kernel refuses to rename or
    remove a mount point (``EBUSY``). Otherwise ``mv notes elsewhere`` would carry a hidden
    ``notes/key.txt`` out from under its name, readable by the next command, and ``mv .claude x``
    would let a command put new skills where the protected ``.claude/skills`` was.
    """
    tops = set(roots)
    found: list[Path] = []
    for path in paths:
        if not any(path != r and path.is_relative_to(r) for r in tops):
            continue
        parent = path.parent
        while parent not in tops and parent != parent.parent:  # up to the nearest root, itself a mount
            if parent not in found:
                found.append(parent)
            parent = parent.parent
    return sorted(found, key=lambda p: (len(p.parts), str(p)))
