"""exec_shell cannot leave the project: the escape battery, through ``ShipAgent.run``.

Each attempt in ``shell_escapes.ATTEMPTS`` runs twice through a scripted model and no approval
callback: in the project ``shipagent init`` writes (the allow list must not let it through), and in
a ``mode: "allow"`` project (every command runs, so only the sandbox stands between the model and
the host). Either way nothing outside the project changes, byte for byte, no process writes after
the call, the TCP listener on 127.0.0.1 gets no connection, and no secret reaches the model.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from shipagent.tools._sandbox import sandbox_status
from tests.support.shell_escapes import (
    ATTEMPTS,
    ENOENT,
    EROFS,
    NETWORK,
    READABLE,
    Attempt,
    World,
    scaffold_ship,
)
from tests.support.tools import Call, Script, make_agent, make_project, tool_results

# Skipped on a developer machine without a working bwrap; never in CI (CI=true, which installs
# bubblewrap) or with SHIPAGENT_REQUIRE_SANDBOX set: there the battery runs and fails, so an image
# that cannot sandbox is noticed rather than skipped.
_REQUIRED = bool(os.environ.get("SHIPAGENT_REQUIRE_SANDBOX") or os.environ.get("CI"))
_SKIP = not sandbox_status().available and not _REQUIRED
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(_SKIP, reason=f"no working bwrap: {sandbox_status().reason}"),
]
KEY = "cli:chat:escape"


def allow_mode(**extra: Any) -> dict[str, Any]:
    return {"permissions": {"execShell": {"mode": "allow", **extra}}}


@pytest.fixture
def make_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    worlds: list[World] = []

    def build(ship: dict[str, Any]) -> World:
        world = World.build(tmp_path, ship)
        monkeypatch.setenv("HOME", str(world.home))
        worlds.append(world)
        return world

    yield build
    for world in worlds:
        world.close()


async def run_exec_shell(root: Path, command: str, timeout_ms: int = 10000) -> tuple[dict[str, Any], Script]:
    """One exec_shell call through ``ShipAgent.run``: ``(tool result, script)``."""
    script = Script([Call("exec_shell", {"command": command, "timeoutMs": timeout_ms}), "done"])
    await make_agent(root, script).run(KEY, "go")
    return tool_results(script.requests[1], "exec_shell")[-1], script  # [-1]: earlier turns come first


async def assert_contained(world: World, attempt: Attempt, script: Script, *, ran: bool) -> None:
    if attempt.late and ran:
        await anyio.sleep(1.8)  # the background writer would have written by now
        assert not (world.project / "late").exists(), "a process outlived the call"
    assert world.snapshot() == world.snapshots, "something outside the project changed"
    assert world.listener.connections == 0, "the sandbox reached the listener on 127.0.0.1"
    assert world.victim.poll() is None, "a host process was killed"
    assert world.secret not in repr(script.requests), "a secret reached the model"


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=[a.name for a in ATTEMPTS])
async def test_the_init_project_lets_no_escape_through_without_approval(
    make_world: Any, attempt: Attempt
) -> None:
    world = make_world(scaffold_ship())
    result, script = await run_exec_shell(world.project, world.command(attempt))
    assert result["success"] is False and result["denied"] is True, result
    assert "no approval callback is configured" in result["error"]
    await assert_contained(world, attempt, script, ran=False)


SANDBOXED = [a for a in ATTEMPTS if a.sandboxed != READABLE]


@pytest.mark.parametrize("attempt", SANDBOXED, ids=[a.name for a in SANDBOXED])
async def test_the_sandbox_stops_every_escape_even_in_allow_mode(make_world: Any, attempt: Attempt) -> None:
    world = make_world(allow_mode())
    result, script = await run_exec_shell(world.project, world.command(attempt))
    assert "denied" not in result, result  # it ran: only the sandbox stood in the way
    output = result["stdout"] + result["stderr"]
    if attempt.sandboxed is not None:
        assert attempt.sandboxed in output, result
    await assert_contained(world, attempt, script, ran=True)
    if attempt.name == "mv-out":
        assert (world.project / "README.md").read_text() == "# readme\n"


# -- what still works inside the sandbox --------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls", "README.md"),
        ("cat README.md", "# readme"),
        ("git status --short", ""),
        ("git log --oneline", "first"),
        ("git diff HEAD", ""),
        ("pwd", ""),
    ],
)
async def test_the_init_project_still_runs_read_only_commands(
    make_world: Any, command: str, expected: str
) -> None:
    world = make_world(scaffold_ship())
    result, _ = await run_exec_shell(world.project, command)
    assert result["success"] is True, result
    assert expected in result["stdout"]
    if command == "pwd":
        assert result["stdout"].strip() == str(world.project.resolve())


async def test_legitimate_work_inside_the_project_runs_in_the_sandbox(make_world: Any) -> None:
    world = make_world(allow_mode())
    command = (
        "echo made > made.txt && cat made.txt | tr a-z A-Z && ls | sort | head -3 && "
        "echo scratch > /tmp/scratch && cat /tmp/scratch && git add made.txt && git status --short"
    )
    result, _ = await run_exec_shell(world.project, command)
    assert result["success"] is True, result
    lines = result["stdout"].splitlines()
    assert lines[:5] == ["MADE", "README.md", "link", "made.txt", "scratch"] and "A  made.txt" in lines
    assert (world.project / "made.txt").read_text() == "made\n"  # written through to the host
    assert not await anyio.Path("/tmp/scratch").exists()  # the sandbox's /tmp is its own
    assert world.snapshot() == world.snapshots


async def test_writable_paths_and_network_are_opt_in(make_world: Any, tmp_path: Path) -> None:
    world = make_world(allow_mode())
    shared = world.out / "shared"
    shared.mkdir()
    ship = allow_mode(writablePaths=[str(shared), "../outside"], network=True)
    world.project.joinpath("ship.json").write_text(json.dumps(ship), encoding="utf-8")
    command = (
        f"echo a > {shared}/a && echo b > ../outside/b && "
        f"echo hi > /dev/tcp/127.0.0.1/{world.listener.port} && echo connected"
    )
    result, _ = await run_exec_shell(world.project, command)
    assert result["success"] is True and result["stdout"] == "connected\n", result
    assert (shared / "a").read_text() == "a\n" and (world.tmpout / "b").read_text() == "b\n"
    for _ in range(50):
        if world.listener.connections:
            break
        await anyio.sleep(0.05)
    assert world.listener.connections == 1
    again, _ = await run_exec_shell(world.project, f"echo x > {world.out}/new")
    assert EROFS in again["stderr"], again


async def test_without_network_the_loopback_is_unreachable_too(make_world: Any) -> None:
    world = make_world(allow_mode())
    result, _ = await run_exec_shell(world.project, f"echo hi > /dev/tcp/127.0.0.1/{world.listener.port}")
    assert NETWORK in result["stderr"] and world.listener.connections == 0


async def test_a_timeout_kills_the_sandboxed_tree_including_a_child_ignoring_sigterm(make_world: Any) -> None:
    world = make_world(allow_mode())
    marker = f"stubborn-{os.urandom(4).hex()}"
    stubborn = (
        f"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)  # {marker}"
    )
    result, _ = await run_exec_shell(
        world.project, f'{sys.executable} -c "{stubborn}" & wait', timeout_ms=1500
    )
    assert result["timedOut"] is True and "killed" in result["error"]

    def survivors() -> list[str]:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                except OSError:
                    continue
                if marker.encode() in cmdline:
                    found.append(entry)
        return found

    for _ in range(40):
        if not survivors():
            break
        await anyio.sleep(0.05)
    assert survivors() == [], "a sandboxed process outlived its timeout"


async def test_big_output_is_still_captured_into_a_context_file(make_world: Any) -> None:
    world = make_world(allow_mode())
    result, _ = await run_exec_shell(world.project, "seq 1 40000")
    assert result["truncated"] is True and result["contextRefs"]["stdout"]
    kept = (world.project / result["outputFiles"]["stdout"]).read_text()
    assert kept.splitlines()[-1] == "40000" and re.search(r"bytes omitted", result["stdout"])


async def test_a_project_inside_home_is_mounted_back_while_the_rest_of_home_stays_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = Path(tempfile.mkdtemp(prefix="shipagent-home-", dir="/var/tmp"))  # not under /tmp
    try:
        project = make_project(home / "code" / "proj", allow_mode())
        secret = f"TOPSECRET-{os.urandom(8).hex()}"
        (home / ".ssh").mkdir()
        (home / ".ssh" / "id_rsa").write_text(secret)
        (home / "code" / "sibling.txt").write_text(secret)
        monkeypatch.setenv("HOME", str(home))
        command = "cat ~/.ssh/id_rsa; cat ../sibling.txt; echo ok > inside.txt && cat inside.txt"
        result, script = await run_exec_shell(project, command)
        assert result["stdout"] == "ok\n" and result["stderr"].count(ENOENT) == 2, result
        assert (project / "inside.txt").read_text() == "ok\n"
        assert secret not in repr(script.requests)
    finally:
        shutil.rmtree(home)


async def test_the_model_learns_why_an_allow_listed_command_needs_approval(make_world: Any) -> None:
    world = make_world(scaffold_ship())
    needs = "exec_shell denied: the command needs approval and no approval callback is configured"
    result, _ = await run_exec_shell(world.project, f"cat {world.out}/secret.txt")
    assert result["error"] == (
        f"{needs}; the allow list could not approve it: the path '{world.out}/secret.txt' is outside the project"
    )
    result, _ = await run_exec_shell(world.project, "git log --output=log.txt")
    assert (
        result["error"]
        == f"{needs}; the allow list could not approve it: the option '--output=log.txt' makes it write a file"
    )
    assert not (world.project / "log.txt").exists()


async def test_tools_installed_under_tmp_still_run_while_their_neighbours_stay_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A CI clone with its virtualenv under /tmp: the private /tmp must not hide the venv's tools.
    base = Path(tempfile.mkdtemp(prefix="shipagent-ci-", dir="/tmp"))
    try:
        tools = base / "venv" / "bin"
        tools.mkdir(parents=True)
        (tools / "shipagent-hello").write_text("#!/bin/sh\necho hello from the venv\n")
        (tools / "shipagent-hello").chmod(0o755)
        secret = f"TOPSECRET-{os.urandom(8).hex()}"
        (base / "neighbour.txt").write_text(secret)
        monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
        project = make_project(base / "proj", allow_mode())
        result, script = await run_exec_shell(project, f"shipagent-hello; cat {base}/neighbour.txt")
        assert result["stdout"] == "hello from the venv\n", result
        assert ENOENT in result["stderr"] and secret not in repr(script.requests)
    finally:
        shutil.rmtree(base)
