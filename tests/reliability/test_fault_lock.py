"""``.ship/lock``: a second process on a project is refused with a clear error naming the holder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

import shipagent
from shipagent import ProjectLockedError, ShipAgent
from shipagent.hosts.cli import _app as cli
from tests.support.core import ScriptedModel

pytestmark = pytest.mark.anyio
runner = CliRunner()
HOLDER = textwrap.dedent(
    """
    import sys, time, anyio
    from shipagent import ShipAgent

    async def main() -> None:
        async with ShipAgent.from_project(sys.argv[1]):
            print("holding", flush=True)
            time.sleep(120)

    anyio.run(main)
    """
)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process with the project open (``async with agent``)."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "ship.json").write_text("{}", encoding="utf-8")  # a project: commands refuse others
    script = tmp_path / "holder_app.py"
    script.write_text(HOLDER, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(script), str(project)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    yield proc
    proc.kill()
    proc.wait()


def project_of(holder: subprocess.Popen[str]) -> Path:
    return Path(str(holder.args[2]))  # type: ignore[index]


async def test_a_second_process_is_refused_naming_the_holder(
    holder: subprocess.Popen[str], tmp_path: Path
) -> None:
    project = project_of(holder)
    info = json.loads((project / ".ship" / "lock").read_text())
    assert info["pid"] == holder.pid and info["command"] == "holder_app.py"

    agent = ShipAgent.from_project(project, model=ScriptedModel().model)
    with pytest.raises(ProjectLockedError) as caught:
        async with agent:
            pass
    message = str(caught.value)
    assert f"pid {holder.pid}" in message and "holder_app.py" in message and "in use" in message
    assert caught.value.pid == holder.pid
    assert isinstance(caught.value, shipagent.ShipAgentError)
    assert not agent.project_lock.held

    # the CLI runs its own event loop: from a worker thread
    await anyio.to_thread.run_sync(check_cli_writers_are_refused_and_readers_are_not, holder, tmp_path)

    # the kernel drops a flock when its holder dies, even by SIGKILL
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    async with agent:
        assert (await agent.run("k:1", "hi")).success
    assert not agent.project_lock.held


def check_cli_writers_are_refused_and_readers_are_not(holder: subprocess.Popen[str], tmp_path: Path) -> None:
    """``run`` and ``context import`` are refused with one error line; ``check``, ``context list`` work."""
    project = str(project_of(holder))
    export = tmp_path / "export.json"
    export.write_text(json.dumps({"version": 1, "chatKey": "k:1", "items": []}), encoding="utf-8")

    run = runner.invoke(cli.app, ["run", "-C", project, "-m", "test", "hello"])
    assert run.exit_code == 2
    lines = run.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: project ") and f"pid {holder.pid}" in lines[0]
    imported = runner.invoke(cli.app, ["context", "import", "k:1", str(export), "-C", project])
    assert imported.exit_code == 2 and "in use by another process" in imported.output

    for reader in (["check", "-C", project], ["context", "list", "k:1", "-C", project]):
        result = runner.invoke(cli.app, reader)
        # not refused (``check`` may still exit 1 for problems of its own, such as no model)
        assert result.exit_code in (0, 1) and "in use" not in result.output, (reader, result.output)
        assert "ship.json OK" in result.output or "no context files" in result.output


async def test_one_process_shares_the_lock_and_durable_mode_skips_it(tmp_path: Path) -> None:
    model = ScriptedModel().model
    agent = ShipAgent.from_project(tmp_path, model=model)
    other = ShipAgent.from_project(tmp_path, model=model)  # e.g. a handover sub-agent, or a second API
    async with agent:
        async with agent:  # re-entrant
            async with other:
                assert (await other.run("k:1", "a")).success
            assert agent.project_lock.held
        assert (await agent.run("k:1", "b")).success
        # another process is refused while we hold it
        probe = await anyio.run_process([sys.executable, "-c", HOLDER, str(tmp_path)], check=False)
        stderr = probe.stderr.decode()
        assert probe.returncode != 0 and "ProjectLockedError" in stderr
        assert f"pid {os.getpid()}" in stderr
    assert not agent.project_lock.held
    assert (tmp_path / ".ship" / "lock").read_text() == ""  # no stale holder left in the file

    free = ShipAgent.from_project(tmp_path, model=model, project_lock=False)
    async with agent, free:
        assert not free.project_lock.held and agent.project_lock.held
