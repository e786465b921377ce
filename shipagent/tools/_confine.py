"""What a command (or an MCP server) may inherit from the server, and which files define the agent.

The sandbox (``_sandbox``) decides what a command can *see*; this module decides what it is
*handed* and what it must not *change*:

- **Environment.** A command starts from an empty environment plus ``PATH``, ``HOME``, ``LANG``,
  ``TERM`` and what ``permissions.execShell.env`` names, so ``env`` never prints the server's API
  keys (MCP stdio servers get the same treatment in ``shipagent.tools.mcp._stdio``).
- **File descriptors.** Only stdin, stdout and stderr: uvloop's spawn passes every descriptor that
  is not close-on-exec (a server started as ``shipagent serve 8>>host.log`` has one), so
  :func:`seal_descriptors` marks every descriptor above 2 close-on-exec before a spawn.
- **The agent's definition.** :func:`agent_files` lists the files that decide what the agent is —
  ship.json, ``Agent.md``, skills, the Python modules the server imported from the project (tool
  modules, the ``--model-factory`` module, what they import), MCP server commands inside the
  project — so the sandbox mounts them read-only; a model that wants to change its agent asks the
  user. Files of that kind that do not exist yet cannot be mounted read-only (a mount point would
  have to be created in the user's project); :func:`created_agent_files` finds the ones a command
  created, and :func:`quarantine` moves them out of the way.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from ..config import ExecShellPermission, McpStdioServer, ShipConfig

__all__ = [
    "PASSED_ALWAYS",
    "agent_files",
    "command_environment",
    "created_agent_files",
    "missing_agent_files",
    "quarantine",
    "seal_descriptors",
    "secret_files",
]

PASSED_ALWAYS = ("PATH", "HOME", "LANG", "TERM")
"""The server's variables every command gets (``HOME`` is the sandbox's own, empty home)."""

_HOST_SECRETS = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
_DEFINING = ("ship.json", "Agent.md", "skills", ".claude/skills")


def command_environment(policy: ExecShellPermission, home: str | None = None) -> dict[str, str]:
    """The whole environment of a command: the allow list and ``permissions.execShell.env``."""
    env = {name: os.environ[name] for name in PASSED_ALWAYS if name in os.environ}
    env.setdefault("PATH", os.defpath)
    if home is not None:
        env["HOME"] = home
    for item in policy.env:
        name, sep, value = item.partition("=")
        if sep:
            env[name] = value
        elif name in os.environ:
            env[name] = os.environ[name]
    return env


def seal_descriptors() -> int:
    """Mark every descriptor above 2 close-on-exec; returns how many were inheritable.

    Python opens its own descriptors close-on-exec, so this only touches the ones the server
    inherited (``8>>host.log``) or a library made inheritable. Cheap (a listing of ``/proc``);
    blocking, so call it from a worker thread.
    """
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: try the usual range
        fds = list(range(3, 256))
    sealed = 0
    for fd in fds:
        if fd <= 2:
            continue
        with contextlib.suppress(OSError):  # closed meanwhile, or the listing's own descriptor
            if os.get_inheritable(fd):
                os.set_inheritable(fd, False)
                sealed += 1
    return sealed


def secret_files() -> list[Path]:
    """Host files no command may read (password hashes), those that exist."""
    return [Path(p) for p in _HOST_SECRETS if os.path.lexists(p)]


def _inside(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


@functools.lru_cache(maxsize=16384)
def _real(file: str) -> Path:
    """A module file, resolved once: ``__file__`` of an imported module does not change."""
    return Path(file).resolve()


@functools.lru_cache(maxsize=64)
def _project_modules(roots: tuple[Path, ...], loaded: frozenset[str]) -> tuple[ModuleType, ...]:
    """Imported modules whose file lies under ``roots``; ``loaded`` (the imported names) keys the cache.

    The names, not their count: a module unloaded and another imported leave the count as it was,
    and the new module's files must be protected too.
    """
    del loaded
    found = []
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and _inside(_real(file), roots):
            found.append(module)
    return tuple(found)


def _module_paths(module: ModuleType) -> list[Path]:
    """The file or package directory to protect for an imported module."""
    top = sys.modules.get(module.__name__.split(".")[0], module)
    file = getattr(top, "__file__", None)
    if isinstance(file, str):
        path = _real(file)
        if path.name == "__init__.py":
            return [path.parent]
        # A single-file module: its byte-code cache too, which Python loads without reading the
        # source again when the header's size and time match.
        return [path, path.parent / "__pycache__"]
    return [Path(p).resolve() for p in getattr(top, "__path__", [])]  # a namespace package


def agent_files(config: ShipConfig, project_root: Path, writable: Iterable[Path] = ()) -> list[Path]:
    """The existing files and directories that define the agent, to mount read-only (blocking).

    Only paths a command could otherwise write matter: inside the project or a writable path.
    """
    root = project_root.resolve()
    roots = [root, *writable]
    found: list[Path] = []

    def add(path: Path) -> None:
        real = path.resolve()
        if real not in found and _inside(real, roots) and real != root and os.path.lexists(real):
            found.append(real)

    for name in _DEFINING:
        add(root / name)
    for raw in config.skills.paths:
        add(root / Path(raw).expanduser())
    for profile in config.profiles.values():
        if profile.agent_md:
            add(root / profile.agent_md)
    for module in _project_modules(tuple(roots), frozenset(sys.modules)):
        for path in _module_paths(module):
            if path.name == "__pycache__":
                with contextlib.suppress(OSError):
                    path.mkdir(exist_ok=True)  # so it can be mounted read-only before a plant
            add(path)
    # Where the server imports from: a sitecustomize.py, a .pth or a module not imported yet placed
    # there runs unsandboxed at the next start (a venv inside the project, a PYTHONPATH folder).
    # The project root itself stays writable: the server adds it to sys.path only while importing.
    # And where it finds programs: an MCP server's command (``npx``, ``uvx``) is looked up on
    # $PATH, so a folder of $PATH inside the project (``node_modules/.bin``) is protected too.
    path_dirs = os.environ.get("PATH", "").split(os.pathsep)
    for entry in (*sys.path, sys.prefix, sys.exec_prefix, *path_dirs):
        with contextlib.suppress(OSError, ValueError):
            if entry and os.path.isdir(entry):
                add(Path(entry))
    for cfg in config.mcp.servers.values():
        if isinstance(cfg, McpStdioServer):
            cwd = root / cfg.cwd if cfg.cwd else root
            for word in (cfg.command, *cfg.args):
                with contextlib.suppress(OSError, ValueError):
                    if (cwd / word).is_file():
                        add(cwd / word)
    return found


def created_agent_files(absent: Iterable[Path]) -> list[Path]:
    """Which of the defining paths that were ``absent`` before a command exist after it."""
    return [p for p in absent if os.path.lexists(p)]


def missing_agent_files(config: ShipConfig, project_root: Path) -> list[Path]:
    """Defining paths that do not exist, to check after a command (blocking).

    ship.json, Agent.md, the skills roots, a profile's ``agentMd``, and ``.env`` (read for the
    ``${VAR}`` of ship.json at the next start); and for every single-file module the server
    imported from the project (``project_tools.py``), the package directory of the same name,
    which Python would import instead at the next start.
    """
    root = project_root.resolve()
    paths = [root / n for n in (*_DEFINING, ".env", *config.skills.paths)]
    paths += [root / p.agent_md for p in config.profiles.values() if p.agent_md]
    for module in _project_modules((root,), frozenset(sys.modules)):
        path = _real(str(module.__file__))
        if path.suffix == ".py" and path.name != "__init__.py":
            paths.append(path.with_suffix(""))
    return [p for p in dict.fromkeys(paths) if not os.path.lexists(p)]


def quarantine(ship_dir: Path, paths: Iterable[Path]) -> list[str]:
    """Move files a command created where the agent's definition lives into ``.ship/refused/``.

    They would change the agent at its next start (a planted ``ship.json`` turning the sandbox
    off); the user finds them there and can move them back on purpose. Returns what was moved.
    """
    moved: list[str] = []
    target = ship_dir / "refused" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for path in paths:
        with contextlib.suppress(OSError):
            target.mkdir(parents=True, exist_ok=True)
            path.rename(target / path.name)
            moved.append(path.name)
    return moved
