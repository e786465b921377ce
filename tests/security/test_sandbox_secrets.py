"""A hostile model cannot read, through exec_shell, anything the HTTP API would refuse its user.

Against a real ``shipagent serve`` (``conftest.hostile``) with a key scoped to ``web:*``, in
``permissions.execShell.mode: allow``, so only the sandbox stands in the way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx

from .conftest import (
    BOB_SECRET,
    DOTENV_SECRET,
    EXTRA_ALLOWED,
    HIDDEN_SECRET,
    NAMED,
    SERVER_SECRETS,
    WEB_KEY,
    Hostile,
)


def everything(output: dict[str, object]) -> str:
    return f"{output.get('stdout', '')}\n{output.get('stderr', '')}\n{output.get('note', '')}"


def test_the_http_api_refuses_the_web_key_another_users_chat(hostile: Hostile) -> None:
    """The baseline the shell must match: bob's chat is not the web key's to read."""
    refused = httpx.get(
        f"{hostile.url}/v1/chats/api:chat:bob/transcript",
        headers={"Authorization": f"Bearer {WEB_KEY}"},
        timeout=30,
    )
    assert refused.status_code == 403
    stored = hostile.root / ".ship" / "chats" / "api%3Achat%3Abob" / "history.jsonl"
    assert BOB_SECRET in stored.read_text(encoding="utf-8")  # it is there, on the host


def test_other_chats_memory_and_context_files_are_not_in_the_sandbox(hostile: Hostile) -> None:
    search = hostile.shell("ls -A .ship; grep -r bob-private . 2>&1 | head -5")
    assert BOB_SECRET not in everything(search)
    output = hostile.shell("cat .ship/chats/api%3Achat%3Abob/history.jsonl .ship/memory/agent-context/*")
    assert BOB_SECRET not in everything(output)
    assert output["exitCode"] != 0
    assert "the command ran in the sandbox" in str(output["note"])  # the model is told why
    assert ".ship/ (other chats, memory)" in str(output["note"])
    listing = hostile.shell("ls -A .ship | wc -l")
    assert listing["stdout"].strip() == "0"  # an empty directory: nothing of any chat


def test_dot_env_is_unreadable(hostile: Hostile) -> None:
    output = hostile.shell("cat .env")
    assert DOTENV_SECRET not in everything(output)
    assert output["exitCode"] != 0
    assert (hostile.root / ".env").read_text(encoding="utf-8").strip().endswith(DOTENV_SECRET)


def test_env_shows_none_of_the_servers_keys(hostile: Hostile) -> None:
    output = hostile.shell("env; cat /proc/1/environ /proc/self/environ | tr '\\0' '\\n'")
    seen = everything(output)
    for secret in SERVER_SECRETS:
        assert secret not in seen
    names = {line.split("=", 1)[0] for line in output["stdout"].splitlines() if "=" in line}
    assert "OPENAI_API_KEY" not in names and "WEB_KEY" not in names and "ADMIN_KEY" not in names
    assert {"PATH", "HOME"} <= names
    assert f"EXTRA_ALLOWED={EXTRA_ALLOWED}" in output["stdout"]  # permissions.execShell.env: NAME
    assert "FIXED_VALUE=set-by-ship-json" in output["stdout"]  # and NAME=VALUE


def test_paths_in_execshell_hide_are_invisible(hostile: Hostile) -> None:
    output = hostile.shell("ls -A private; cat private/data.txt notes/key.txt; cat notes/todo.txt")
    assert HIDDEN_SECRET not in everything(output)
    assert "visible" in output["stdout"]  # only what was named is hidden


def test_an_mcp_server_gets_only_what_its_entry_names(hostile: Hostile) -> None:
    result = hostile.turn("web:alice", "call: probe__probe")
    calls = [c for c in result["toolCalls"] if c["tool"] == "probe__probe"]
    assert len(calls) == 1 and calls[0]["success"], result
    handed = json.loads(
        calls[0]["output"] if isinstance(calls[0]["output"], str) else calls[0]["output"]["text"]
    )
    assert handed["env"]["NAMED"] == NAMED
    for secret in SERVER_SECRETS:
        assert secret not in json.dumps(handed["env"])
    assert "EXTRA_ALLOWED" not in handed["env"]  # that one is for commands, not for this server
    assert handed["fd8"] is False


def test_no_process_outside_the_sandbox_is_visible(hostile: Hostile) -> None:
    """A fresh PID namespace: the server's /proc/<pid>/environ cannot even be named."""
    assert hostile.process is not None
    output = hostile.shell(
        f"ls /proc | grep -c '^[0-9]'; cat /proc/{hostile.process.pid}/environ 2>&1 | tr '\\0' '\\n'"
    )
    count = int(output["stdout"].splitlines()[0])
    assert count < 20  # bwrap, the shell and this pipeline; the host runs many more
    for secret in SERVER_SECRETS:
        assert secret not in everything(output)


def test_an_inherited_descriptor_8_is_unusable(hostile: Hostile) -> None:
    """The server was started with fd 8 open on a host file (uvloop would pass it on)."""
    assert hostile.process is not None
    assert os.readlink(f"/proc/{hostile.process.pid}/fd/8") == str(hostile.host_log)  # it does hold it
    output = hostile.shell("echo planted >&8; echo rc=$?; ls -l /proc/self/fd")
    assert "rc=0" not in output["stdout"]
    assert hostile.host_log.read_bytes() == b""


def test_host_secrets_are_unreadable(hostile: Hostile) -> None:
    shadow = Path("/etc/shadow")
    output = hostile.shell("cat /etc/shadow /etc/gshadow; echo ---; ls -A /root; echo ---; ls -A /home")
    if os.access(shadow, os.R_OK):  # the server can read it (root here): the sandbox must not
        first = shadow.read_text(encoding="utf-8", errors="replace").splitlines()[0]
        assert first not in everything(output)
    _, root_listing, home_listing = output["stdout"].split("---\n")
    allowed = _mounted_back(Path("/root")) | _project_top(hostile.root, Path("/root"))
    assert set(root_listing.split()) <= allowed, root_listing
    assert set(home_listing.split()) <= _project_top(hostile.root, Path("/home")) | _users_with_tools()


def _mounted_back(home: Path) -> set[str]:
    """Tool folders of a home that come back read-only (``~/.cargo`` on PATH): allowed names."""
    names = set()
    for raw in os.environ.get("PATH", "").split(os.pathsep):
        path = Path(raw)
        if path.is_relative_to(home) and path != home:
            names.add(path.relative_to(home).parts[0])
    return names


def _users_with_tools() -> set[str]:
    return {p.name for p in Path("/home").glob("*") if _mounted_back(p)}


def _project_top(root: Path, hidden: Path) -> set[str]:
    return {root.relative_to(hidden).parts[0]} if root.is_relative_to(hidden) else set()
