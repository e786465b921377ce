"""The allow list's guard (``allow_blocker``), the bwrap command line, and the three sandbox modes.

The no-bwrap paths run with a PATH that holds bash and a few tools but no bwrap, exactly as on a
machine without bubblewrap; a fake ``bwrap`` that fails stands for one that cannot create
namespaces (a locked-down container).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from shipagent.config import ExecShellPermission, ShipConfig
from shipagent.tools import decide_exec_shell, sandbox_check_hook, sandbox_report
from shipagent.tools._sandbox import TMPFS_BYTES, SandboxLayout, bwrap_argv, sandbox_status
from shipagent.tools._shellwords import allow_blocker
from tests.support.tools import Call, Script, make_agent, make_project, tool_results

KEY = "cli:chat:policy"
needs_bwrap = pytest.mark.skipif(not sandbox_status().available, reason="no working bwrap")


# -- allow_blocker ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("ls -la", None),
        ("cat README.md src/a.py", None),
        ("git log --oneline -n 5 2>&1", None),
        ("ls >/dev/null 2>&1", None),
        ("ls 2>/dev/null | wc -l", None),
        ("ls >&2", None),
        ("ls 3>&-", None),
        ("git diff HEAD~1..HEAD -- src", None),
        ("grep '>' notes.txt", None),  # a quoted '>' is an argument, not a redirection
        ('ls "a > b"', None),
        ("ls # > comment", None),
        ("cat /dev/null > x", "redirection '> x'"),
        ("ls >> x", "redirection '>> x'"),
        ("ls >| x", "redirection '>| x'"),
        ("ls &> x", "redirection '&> x'"),
        ("ls &>> x", "redirection '&>> x'"),
        ("ls 1<> x", "redirection '1<> x'"),
        ("ls 2>x", "redirection '2> x'"),
        ("ls {fd}>x", "redirection '{fd}> x'"),
        ("ls >&x", "redirection '>& x'"),
        ("ls >", "without a target"),
        ("ls | tee x", "'tee'"),
        ("cat <<EOF\nhi\nEOF", "here-document"),
        ("cat <<< hi", "here-document or here-string"),
        ("git log --output=x", "'--output=x'"),
        ("git log --outp=x", "'--outp=x'"),
        ("sort -o x y", "'sort -o'"),
        ("sed -i s/a/b/ f", "'sed -i'"),
        ("find . -delete", "'find -delete'"),
        ("xargs find . -fprint x", "'find -fprint'"),
        ("dd if=a of=b", "'dd of='"),
        ("uniq a b", "'uniq IN OUT'"),
        ('cat "open', "cannot be parsed"),
    ],
)
def test_allow_blocker_names_every_write(command: str, reason: str | None) -> None:
    found = allow_blocker(command)
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("cat /etc/shadow", "'/etc/shadow' is outside the project"),
        ("cat ../x", "'../x' is outside the project"),
        ("cat sub/../../x", "outside the project"),
        ("cat < /etc/passwd", "'/etc/passwd' is outside"),
        ("git log -C/etc", "'/etc' is outside"),
        ("git log --git-dir=/elsewhere", "'/elsewhere' is outside"),
        ("cat ~/.ssh/id_rsa", "expanded by the shell"),
        ("cat $HOME/.netrc", "expanded by the shell"),
        ("cat {a,/etc/shadow}", "expanded by the shell"),
        ("cat .*/x", "may match '..'"),
        ("cat out/secret", "through a symlink"),
        ("cat out/../x", "through a symlink"),  # '..' applies to the link's target, not the link
        ("cat sub/../out/x", "through a symlink"),
        ("cat ALIAS/sub/file", None),  # the project reached through a symlinked path is inside
        ("cat ALIAS/../x", "outside the project"),
        ("cat *", "matches 'out'"),
        ("ls -la /", "'/' is outside"),
        ("cat sub/file", None),
        ("cat sub/*", None),
        ("cat /PROJECT/sub/file", None),
        ("ls", None),
    ],
)
def test_allow_blocker_keeps_arguments_inside_the_project(
    tmp_path: Path, command: str, reason: str | None
) -> None:
    root = tmp_path / "p"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "file").write_text("x")
    (root / "out").symlink_to(tmp_path)
    (tmp_path / "alias").symlink_to(root)
    command = command.replace("/PROJECT", str(root)).replace("ALIAS", str(tmp_path / "alias"))
    found = allow_blocker(command, root)
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found


def test_decide_sends_a_blocked_allow_match_to_the_mode_and_deny_still_wins(tmp_path: Path) -> None:
    policy = ExecShellPermission(mode="ask", allow=["cat *", "ls*"], deny=["*shadow*"])
    ask = decide_exec_shell("cat README.md > out.txt", policy, tmp_path)
    assert ask.action == "ask"
    assert ask.reason == (
        "permissions.execShell.mode is 'ask' and the allow patterns match but cannot approve it: "
        "it writes to a file through the redirection '> out.txt'"
    )
    assert decide_exec_shell("cat /etc/shadow", policy, tmp_path).action == "deny"
    assert decide_exec_shell("cat /etc/passwd", policy, tmp_path).action == "ask"
    assert decide_exec_shell("cat notes.txt", policy, tmp_path).action == "allow"
    strict = policy.model_copy(update={"mode": "deny"})
    assert decide_exec_shell("ls > x", strict, tmp_path).action == "deny"
    assert (
        decide_exec_shell("ls > x", policy.model_copy(update={"mode": "allow"}), tmp_path).action == "allow"
    )


# -- the bwrap command line ---------------------------------------------------------------------


def test_bwrap_argv_mounts_in_an_order_where_later_mounts_win() -> None:
    layout = SandboxLayout(
        project_root=Path("/home/u/proj"),
        ship_dir=Path("/home/u/proj/.ship"),
        hidden=(Path("/home/u"), Path("/tmp")),
        readable=(Path("/home/u/.pyenv"),),
        writable=(Path("/srv/cache"), Path("/home/u/proj")),
        protected=(Path("/home/u/proj/ship.json"),),
        masked_dirs=(Path("/home/u/proj/secrets"),),
        masked_files=(Path("/home/u/proj/.env"), Path("/etc/shadow")),
    )
    assert bwrap_argv("/usr/bin/bwrap", layout) == [
        "/usr/bin/bwrap",
        *("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"),
        *("--size", str(TMPFS_BYTES), "--tmpfs", "/tmp", "--size", str(TMPFS_BYTES), "--tmpfs", "/home/u"),
        *("--ro-bind-try", "/home/u/.pyenv", "/home/u/.pyenv"),
        *("--bind", "/home/u/proj", "/home/u/proj"),
        *("--bind-try", "/srv/cache", "/srv/cache", "--bind-try", "/home/u/proj", "/home/u/proj"),
        # after every writable mount, so a writable path cannot uncover them
        *("--ro-bind-try", "/home/u/proj/ship.json", "/home/u/proj/ship.json"),
        *("--tmpfs", "/home/u/proj/.ship", "--remount-ro", "/home/u/proj/.ship"),
        *("--tmpfs", "/home/u/proj/secrets", "--remount-ro", "/home/u/proj/secrets"),
        *("--ro-bind", "/dev/null", "/home/u/proj/.env", "--ro-bind", "/dev/null", "/etc/shadow"),
        "--unshare-net",
        *("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--new-session", "--die-with-parent"),
        *("--cap-drop", "ALL", "--chdir", "/home/u/proj", "--"),
    ]
    assert "--unshare-net" not in bwrap_argv(
        "bwrap", SandboxLayout(Path("/p"), Path("/p/.ship"), network=True)
    )


# -- the three modes ----------------------------------------------------------------------------


@pytest.fixture
def no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH with bash and the usual tools but no bwrap."""
    bin_dir = tmp_path / "bin-without-bwrap"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "touch", "cat", "ls"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert shutil.which("bwrap") is None
    return bin_dir


async def exec_once(root: Path, command: str) -> dict[str, Any]:
    script = Script([Call("exec_shell", {"command": command}), "done"])
    await make_agent(root, script).run(KEY, "go")
    return tool_results(script.requests[1], "exec_shell")[-1]  # type: ignore[no-any-return]


def ship(**shell: Any) -> dict[str, Any]:
    return {"permissions": {"execShell": {"mode": "allow", **shell}}}


@pytest.mark.anyio
async def test_auto_without_bwrap_runs_unsandboxed_and_warns_once(
    tmp_path: Path, no_bwrap: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = make_project(tmp_path / "p", ship())
    outside = tmp_path / "outside"
    outside.mkdir()
    caplog.set_level(logging.WARNING, logger="shipagent.tools")
    async with make_agent(root, Script(["hi"])):
        pass  # starting the agent says it
    first = await exec_once(root, f"touch {outside}/written")
    second = await exec_once(root, "touch inside")
    assert first["success"] is True and second["success"] is True
    assert (outside / "written").exists(), "unsandboxed: nothing stops the write, hence the warning"
    warnings = [r.getMessage() for r in caplog.records if "WITHOUT a sandbox" in r.getMessage()]
    assert len(warnings) == 1
    assert (
        "bwrap is not on PATH; install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)" in warnings[0]
    )
    [(level, message)] = sandbox_report(ShipConfig.model_validate(ship()), root)
    assert level == "warning" and message == warnings[0]


@pytest.mark.anyio
async def test_required_without_bwrap_refuses_every_command_with_a_clear_error(
    tmp_path: Path, no_bwrap: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = make_project(tmp_path / "p", ship(sandbox="required"))
    caplog.set_level(logging.ERROR, logger="shipagent.tools")
    result = await exec_once(root, "touch made")
    assert result["success"] is False and result["denied"] is True
    assert result["error"] == (
        "exec_shell refused: permissions.execShell.sandbox is 'required' but the sandbox is unavailable: "
        "bwrap is not on PATH; install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap). exec_shell "
        "refuses every command until it is; or set permissions.execShell.sandbox to 'auto' in ship.json"
    )
    assert not (root / "made").exists()
    assert any("'required'" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
    report = sandbox_report(ShipConfig.model_validate(ship(sandbox="required")), root)
    assert report == [("error", result["error"].removeprefix("exec_shell refused: "))]


@pytest.mark.anyio
async def test_a_bwrap_that_cannot_sandbox_counts_as_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    status = sandbox_status()
    assert not status.available
    assert (
        status.reason
        == f"{fake} cannot create a sandbox here (bwrap: No permissions to create new namespace)"
    )
    root = make_project(tmp_path / "p", ship(sandbox="required"))
    result = await exec_once(root, "touch made")
    assert "No permissions to create new namespace" in result["error"] and not (root / "made").exists()


@needs_bwrap
@pytest.mark.anyio
async def test_off_runs_unsandboxed_and_required_runs_sandboxed(tmp_path: Path) -> None:
    # outside /tmp, which the sandbox replaces: a host directory it sees read-only
    outside = Path(tempfile.mkdtemp(prefix="shipagent-off-", dir="/var/tmp"))
    try:
        off = make_project(tmp_path / "off", ship(sandbox="off"))
        assert (await exec_once(off, f"touch {outside}/off"))["success"] is True
        assert (outside / "off").exists()
        assert sandbox_report(ShipConfig.model_validate(ship(sandbox="off")), off) == []
        required = make_project(tmp_path / "req", ship(sandbox="required"))
        result = await exec_once(required, f"touch {outside}/req")
        assert "Read-only file system" in result["stderr"] and not (outside / "req").exists()
        assert sandbox_report(ShipConfig.model_validate(ship(sandbox="required")), required) == []
    finally:
        shutil.rmtree(outside)


def test_report_and_check_hook_name_missing_writable_paths(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", ship(writablePaths=["cache", "/nowhere/at/all"]))
    (root / "cache").mkdir()
    config = ShipConfig.model_validate(json.loads((root / "ship.json").read_text()))
    report = sandbox_report(config, root)
    assert (
        "warning",
        "permissions.execShell.writablePaths: '/nowhere/at/all' does not exist; it is not mounted",
    ) in (report)
    assert not any("'cache'" in message for _, message in report)

    class Console:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def print(self, *objects: Any) -> None:
            self.lines.append(" ".join(map(str, objects)))

    console = Console()
    sandbox_check_hook(root, config, console)
    assert (
        console.lines[-1]
        == "warning: permissions.execShell.writablePaths: '/nowhere/at/all' does not exist; it is not mounted"
    )
    if sandbox_status().available:
        assert console.lines[0].startswith("exec_shell sandbox: bubblewrap (") and console.lines[0].endswith(
            "network off"
        )


@pytest.mark.anyio
@pytest.mark.parametrize(
    "command",
    [
        "cat /dev/null > {out}/victim",
        "ls > {out}/victim",
        "git log --output={out}/victim",
        "cat {out}/secret",
        "cat ../outside/secret",
    ],
)
async def test_without_a_sandbox_the_init_allow_list_is_no_write_or_read_channel(
    tmp_path: Path, no_bwrap: Path, command: str
) -> None:
    """The commands from the field report, on a machine without bwrap (auto: unsandboxed)."""
    text = resources.files("shipagent").joinpath("scaffold", "ship.json").read_text(encoding="utf-8")
    root = make_project(tmp_path / "p", json.loads(text))
    out = tmp_path / "outside"
    out.mkdir()
    (out / "victim").write_text("keep")
    (out / "secret").write_text("TOPSECRET")
    script = Script([Call("exec_shell", {"command": command.format(out=out)}), "done"])
    await make_agent(root, script).run(KEY, "go")
    result = tool_results(script.requests[1], "exec_shell")[-1]
    assert result["denied"] is True and "the allow list could not approve it" in result["error"]
    assert (out / "victim").read_text() == "keep"
    assert "TOPSECRET" not in repr(script.requests)
