"""The exec_shell sandbox: every command runs inside bubblewrap (``bwrap``) when it works here.

The allow list decides *whether* a command runs; the sandbox decides *what it can touch*, and only
the kernel can promise that. Inside the sandbox:

- the whole file system is mounted read-only, except the project root (read-write), a private
  empty ``/tmp`` (in memory, at most :data:`TMPFS_BYTES`), and ``permissions.execShell.writablePaths``;
- ``.ship/`` (every chat's history, memory, context files) is an empty read-only directory;
  ``.env``, ``.env.*`` and ``.envrc`` of the project, ``/etc/shadow`` and ``/etc/gshadow`` cannot
  be opened (``/dev/null`` on a ``nodev`` mount over them), and ``permissions.execShell.hide``
  hides more: a command sees no other chat and no secret. exec_shell captures
  a command's output through pipes, outside the sandbox, and the model pages big outputs with
  ``context_read``, so no command needs ``.ship/``;
- what defines the agent (``_confine.agent_files``: ship.json, Agent.md, skills, the project's
  modules the server imported, MCP server scripts) is mounted read-only over the project;
- the user's home directory, ``/root``, ``/home`` and ``/run`` (where daemons keep their Unix
  sockets) are empty; a project inside them is mounted back on top, and so are (read-only) the
  home's directories that hold ``$PATH`` entries or the running Python (``~/.pyenv``, ``~/.cargo``);
- limits (:class:`SandboxLimits`): how many processes run at once and how big a file may grow;
- the network is a private, empty namespace unless ``permissions.execShell.network`` is true;
- a new PID namespace, a new session and ``--die-with-parent``: when the command's shell exits or
  the call is killed, every process it started dies with it, and ``/proc`` shows only the
  sandbox's processes (no other process's environment); every capability is dropped, so a root
  user cannot remount anything.

:func:`bwrap_argv` is pure (easy to test exhaustively); :func:`plan_sandbox` looks at the machine
(which ``bwrap``, whether it works, which directories exist) and must run in a worker thread.
``sandbox: "auto"`` runs unsandboxed with one logged warning when bwrap is missing or broken;
``"required"`` refuses every command then; ``"off"`` never sandboxes.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from ..config import ExecShellPermission, ShipConfig
from ._confine import agent_files, secret_files
from ._mounts import anchors, exact_dirs, hidden_paths, homes, tool_dirs, writable_paths

__all__ = [
    "TMPFS_BYTES",
    "SandboxLayout",
    "SandboxLimits",
    "SandboxPlan",
    "SandboxStatus",
    "bwrap_argv",
    "plan_sandbox",
    "sandbox_check_hook",
    "sandbox_report",
    "sandbox_status",
    "warn_if_unsandboxed",
]

log = logging.getLogger("shipagent.tools")

TMPFS_BYTES = 256 * 1024**2
"""How much one private, writable tmpfs (``/tmp``, the empty home) may hold. A tmpfs lives in the
host's memory, and ``maxFileBytes`` bounds one file, not how many: without a size a command could
fill ``/tmp`` with four-megabyte files until the host swaps. A write past it fails (``ENOSPC``)."""

_INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
_PROBE_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Resource limits inside the sandbox.

    ``processes`` caps processes and threads at once. The portable ``RLIMIT_NPROC`` does not bind
    root (the kernel exempts uid 0), so when the server runs as root the sandbox's PID namespace
    gets ``kernel.pid_max`` instead (Linux 6.14 and later), ``/proc/sys`` is remounted read-only
    so the command cannot raise it, and the capabilities are dropped afterwards (``setpriv``).
    ``file_bytes`` is ``RLIMIT_FSIZE``: a write past it fails (``SIGXFSZ``).
    """

    processes: int = 1024
    file_bytes: int | None = 1024**3
    pid_namespace: bool = False
    """Cap with the PID namespace's ``pid_max`` (root with ``setpriv``) instead of capabilities
    dropped by bwrap itself."""


# Runs inside the sandbox before the command: $1 processes, $2 file KiB or "none", then the command.
_LIMITS = r"""n=$1; f=$2; shift 2
ulimit -u "$n" || { echo "shipagent sandbox: cannot limit processes" >&2; exit 125; }
if [ "$f" != none ]; then ulimit -f "$f" || { echo "shipagent sandbox: cannot limit file size" >&2; exit 125; }; fi
exec "$@"
"""
_LIMITS_AS_ROOT = r"""n=$1; f=$2; shift 2
v=$((n + 1)); [ "$v" -ge 301 ] || v=301  # the kernel refuses less (or less than 8 per CPU)
capped=
while [ "$v" -le 4194304 ]; do
  if echo "$v" 2>/dev/null >/proc/sys/kernel/pid_max; then capped=1; break; fi
  v=$((v * 2))
done
if [ -z "$capped" ] || ! { mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys; }; then
  echo "shipagent sandbox: cannot limit processes (kernel.pid_max of the PID namespace)" >&2; exit 125
fi
if [ "$f" != none ]; then ulimit -f "$f" || { echo "shipagent sandbox: cannot limit file size" >&2; exit 125; }; fi
exec setpriv --bounding-set=-all --inh-caps=-all --ambient-caps=-all --no-new-privs -- "$@"
"""


def _limits_argv(limits: SandboxLimits, shell: str) -> list[str]:
    files = "none" if limits.file_bytes is None else str(max(1, limits.file_bytes // 1024))
    script = _LIMITS_AS_ROOT if limits.pid_namespace else _LIMITS
    return [shell, "-c", script, "shipagent-limits", str(limits.processes), files]


@dataclass(frozen=True, slots=True)
class SandboxLayout:
    """The mounts of one sandbox, every path already resolved (no symlinks).

    Attributes:
        project_root: mounted read-write; the command starts there.
        ship_dir: the project's ``.ship/``, mounted read-only over the project.
        hidden: directories replaced by an empty tmpfs (``/tmp``, ``/run``, the home directory).
        readable: paths mounted back read-only after hiding (``/etc/resolv.conf``'s target).
        writable: extra read-write paths; one that does not exist is skipped by bwrap.
        network: keep the host network (otherwise a private, empty network namespace).
        protected: paths mounted read-only over the project (what defines the agent).
        masked_dirs: directories replaced by an empty read-only tmpfs (besides ``ship_dir``).
        masked_files: files that cannot be opened (``/dev/null`` mounted over them, ``nodev``).
        limits: resource limits, applied by a short shell prelude inside the sandbox.
        shell: the shell that runs the prelude.
    """

    project_root: Path
    ship_dir: Path
    hidden: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    network: bool = False
    protected: tuple[Path, ...] = ()
    masked_dirs: tuple[Path, ...] = ()
    masked_files: tuple[Path, ...] = ()
    limits: SandboxLimits | None = None
    shell: str = "/bin/sh"


def bwrap_argv(bwrap: str, layout: SandboxLayout) -> list[str]:
    """The bwrap command line (up to and including ``--``) that runs a program inside ``layout``.

    Order matters, since a later mount covers an earlier one: the read-only root first, then the
    hidden directories, then the project (so a project under ``/tmp`` or the home directory is
    mounted back), then the extra writable paths, then the directories that lead to a protected or
    hidden path (:func:`._mounts.anchors`), then the agent's own files read-only, and the masks last, so no writable path can uncover ``.ship/`` or a secret.
    """
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for hidden in sorted(layout.hidden, key=lambda p: len(p.parts)):
        argv += ["--size", str(TMPFS_BYTES), "--tmpfs", str(hidden)]
    for path in layout.readable:
        argv += ["--ro-bind-try", str(path), str(path)]
    root = str(layout.project_root)
    argv += ["--bind", root, root]
    for path in layout.writable:
        argv += ["--bind-try", str(path), str(path)]
    for path in anchors(
        [layout.project_root, *layout.writable],
        (*layout.protected, *layout.masked_dirs, *layout.masked_files),
    ):
        argv += ["--bind", str(path), str(path)]
    for path in layout.protected:
        argv += ["--ro-bind-try", str(path), str(path)]
    for path in sorted({layout.ship_dir, *layout.masked_dirs}, key=lambda p: (len(p.parts), str(p))):
        argv += ["--tmpfs", str(path), "--remount-ro", str(path)]
    for path in layout.masked_files:
        argv += ["--ro-bind", "/dev/null", str(path)]
    if not layout.network:
        argv.append("--unshare-net")
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--new-session", "--die-with-parent"]
    if layout.limits is None or not layout.limits.pid_namespace:
        argv += ["--cap-drop", "ALL"]
    argv += ["--chdir", root, "--"]
    if layout.limits is not None:
        argv += _limits_argv(layout.limits, layout.shell)
    return argv


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    """Whether bubblewrap works on this machine: ``bwrap`` is its path, ``reason`` why not."""

    available: bool
    bwrap: str | None
    reason: str


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str) -> str | None:
    """Start a minimal sandbox once per bwrap binary; ``None`` when it works, else why not."""
    argv = [
        bwrap,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-net",
        "--unshare-pid",
    ]
    argv += ["--new-session", "--die-with-parent", "--cap-drop", "ALL", "--", "/bin/sh", "-c", ":"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=_PROBE_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} could not be started ({exc})"
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"{bwrap} cannot create a sandbox here ({detail[-1] if detail else f'exit {done.returncode}'})"
    return None


def sandbox_status(path: str | None = None) -> SandboxStatus:
    """Find ``bwrap`` on ``path`` (default: ``$PATH``) and check, once per binary, that it works."""
    if not sys.platform.startswith("linux"):
        return SandboxStatus(False, None, "the bubblewrap sandbox needs Linux")
    found = shutil.which("bwrap", path=path)
    if found is None:
        return SandboxStatus(False, None, f"bwrap is not on PATH; {_INSTALL_HINT}")
    bwrap = os.path.realpath(found)
    failure = _probe(bwrap)
    if failure is not None:
        return SandboxStatus(False, bwrap, failure)
    return SandboxStatus(True, bwrap, "")


def _pid_max_per_namespace() -> bool:
    """Whether ``kernel.pid_max`` belongs to a PID namespace (Linux 6.14+).

    Before that it is one value for the whole machine: writing it from the sandbox would limit the
    host, so the sandbox never does.
    """
    digits = [int(part) for part in re.findall(r"\d+", os.uname().release)[:2]]
    return len(digits) == 2 and (digits[0], digits[1]) >= (6, 14)


def process_limit_problem() -> str | None:
    """Why ``permissions.execShell.maxProcesses`` cannot bind here, or ``None`` when it can."""
    if os.geteuid() != 0:
        return None  # RLIMIT_NPROC binds every user but root
    if shutil.which("setpriv") is None:
        return "the server runs as root and setpriv (util-linux) is not on PATH"
    if not _pid_max_per_namespace():
        return f"the server runs as root and Linux {os.uname().release} has no per-namespace pid_max (6.14+)"
    return None


def _limits(policy: ExecShellPermission) -> SandboxLimits:
    as_root = os.geteuid() == 0 and process_limit_problem() is None
    return SandboxLimits(policy.max_processes, policy.max_file_bytes, pid_namespace=as_root)


def _layout(
    policy: ExecShellPermission, project_root: Path, config: ShipConfig | None = None
) -> SandboxLayout:
    """Resolve the paths of a sandbox for ``project_root`` (touches the file system)."""
    root = project_root.resolve()
    ship_dir = (root / ".ship").resolve()
    ship_dir.mkdir(parents=True, exist_ok=True)  # mounted over: it must exist before the command
    hidden: list[Path] = []
    for candidate in (Path("/tmp"), Path("/run"), Path("/root"), Path("/home"), *homes()):
        real = candidate.resolve()
        if real != Path("/") and real.is_dir() and real not in hidden:
            hidden.append(real)  # a project inside is mounted back over it
    system = [h for h in hidden if h in (Path("/tmp"), Path("/run"))]
    readable = tool_dirs([h for h in hidden if h not in system]) + exact_dirs(system)
    if policy.network:  # DNS: resolv.conf is often a symlink into /run (systemd-resolved)
        resolv = Path("/etc/resolv.conf").resolve()
        if any(resolv.is_relative_to(h) for h in hidden):
            readable.append(resolv)
    writable = tuple(writable_paths(policy, root))
    protected = tuple(agent_files(config, root, writable)) if config is not None else ()
    masked_dirs, masked_files = hidden_paths(policy, root)
    masked_files += [p.resolve() for p in secret_files()]
    return SandboxLayout(
        root,
        ship_dir,
        tuple(hidden),
        tuple(readable),
        writable,
        policy.network,
        protected=protected,
        masked_dirs=tuple(masked_dirs),
        masked_files=tuple(dict.fromkeys(masked_files)),
        limits=_limits(policy),
        shell=shutil.which("bash") or "/bin/sh",
    )


@dataclass(frozen=True, slots=True)
class SandboxPlan:
    """How one exec_shell call runs: under ``prefix`` (empty: unsandboxed), or ``refusal``."""

    prefix: tuple[str, ...] = ()
    refusal: str | None = None


def _unavailable_message(policy: ExecShellPermission, status: SandboxStatus) -> str:
    if policy.sandbox == "required":
        return (
            "permissions.execShell.sandbox is 'required' but the sandbox is unavailable: "
            f"{status.reason}. exec_shell refuses every command until it is; or set "
            "permissions.execShell.sandbox to 'auto' in ship.json"
        )
    return (
        f"exec_shell runs commands WITHOUT a sandbox: {status.reason}. Approved and allow-listed "
        "commands can write anywhere this user can; install bubblewrap, or set "
        "permissions.execShell.sandbox to 'off' in ship.json to accept that"
    )


_warned: set[tuple[Path, str]] = set()
_warned_lock = threading.Lock()


def warn_if_unsandboxed(policy: ExecShellPermission, project_root: Path) -> str | None:
    """Log, once per project and process, that commands run unsandboxed (or are refused).

    Called when an agent starts and again before an unsandboxed command, so a program that never
    enters ``async with agent`` still hears it once. Blocking (it may probe bwrap): run in a thread.
    Returns the message, or ``None`` when the sandbox works or is ``off``.
    """
    if policy.sandbox == "off":
        return None
    status = sandbox_status()
    if status.available:
        return None
    message = _unavailable_message(policy, status)
    key = (project_root.resolve(), policy.sandbox)
    with _warned_lock:
        first = key not in _warned
        _warned.add(key)
    if first:
        (log.error if policy.sandbox == "required" else log.warning)("%s", message)
    return message


def plan_sandbox(
    policy: ExecShellPermission, project_root: Path, config: ShipConfig | None = None
) -> SandboxPlan:
    """Decide how the next command runs under ``policy`` (blocking: run in a worker thread).

    With ``config``, the files that define its agent are mounted read-only too.
    """
    if policy.sandbox == "off":
        return SandboxPlan()
    status = sandbox_status()
    if not status.available or status.bwrap is None:
        message = warn_if_unsandboxed(policy, project_root)
        return SandboxPlan(refusal=message if policy.sandbox == "required" else None)
    return SandboxPlan(prefix=tuple(bwrap_argv(status.bwrap, _layout(policy, project_root, config))))


Level = Literal["error", "warning"]


def sandbox_report(config: ShipConfig, project_root: Path | None = None) -> list[tuple[Level, str]]:
    """Problems with the exec_shell sandbox, for ``shipagent check``: ``[(level, message)]``.

    ``required`` without a working bwrap is an error (every command would be refused); ``auto``
    without one is a warning (commands run unsandboxed). A writable path that does not exist is a
    warning (bwrap skips it).
    """
    policy = config.permissions.exec_shell
    if policy.sandbox == "off":
        return []
    report: list[tuple[Level, str]] = []
    status = sandbox_status()
    if not status.available:
        report.append(
            ("error" if policy.sandbox == "required" else "warning", _unavailable_message(policy, status))
        )
    problem = process_limit_problem() if status.available else None
    if problem is not None:
        report.append(
            (
                "warning",
                f"permissions.execShell.maxProcesses is not enforced: {problem}; run the server as "
                "another user, or install util-linux",
            )
        )
    if project_root is not None:
        root = project_root.resolve()
        for raw in policy.writable_paths:
            named = root / Path(raw).expanduser()
            if Path(os.path.normpath(named)).is_relative_to(root) and not named.resolve().is_relative_to(
                root
            ):
                report.append(
                    (
                        "warning",
                        f"permissions.execShell.writablePaths: {raw!r} leads outside the project "
                        "through a symlink; it is not mounted (name the target itself)",
                    )
                )
            elif not named.exists():
                report.append(
                    (
                        "warning",
                        f"permissions.execShell.writablePaths: {raw!r} does not exist; it is not mounted",
                    )
                )
    return report


class _Printer(Protocol):
    def print(self, *objects: Any) -> None: ...


def sandbox_check_hook(
    project_root: Path, config: ShipConfig, console: _Printer, *, report: bool = True
) -> None:
    """A ``shipagent check`` hook (``cli.check_hooks``): the sandbox state and :func:`sandbox_report`.

    ``report=False`` prints the state only: ``shipagent check`` lists the report's problems through
    ``shipagent.check_project``, which also decides the exit status.
    """
    from rich.markup import escape

    policy = config.permissions.exec_shell
    status = sandbox_status() if policy.sandbox != "off" else None
    if status is None:
        console.print("exec_shell sandbox: off")
    elif status.available:
        network = "on" if policy.network else "off"
        console.print(escape(f"exec_shell sandbox: bubblewrap ({status.bwrap}), network {network}"))
        files = "no limit" if policy.max_file_bytes is None else f"{policy.max_file_bytes:,} bytes"
        console.print(
            escape(
                f"exec_shell limits: {policy.max_processes} processes, files up to {files}, output "
                f"stored up to {policy.max_output_bytes:,} bytes per stream; hidden: .ship/, .env"
                + "".join(f", {p}" for p in policy.hide)
            )
        )
    if report:
        for level, message in sandbox_report(config, project_root):
            console.print(escape(f"{level}: {message}"))
