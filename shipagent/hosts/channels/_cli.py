"""``shipagent channels run | pending | pair CODE``: the channels without the HTTP server, and pairing.

``pending`` and ``pair`` only read and write ``.ship/channels/pairing.json`` (under its own file
lock), never the project lock, so they work while ``shipagent channels run`` (or ``serve``) holds
the project, and a pairing takes effect on the sender's next message without a restart.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console
from rich.markup import escape

from ...chatkeys import ShipPaths
from ...errors import ShipAgentError
from ..cli._model_factory import FACTORY_HELP
from ..cli._opts import ProjectOpt, log_to_stderr
from ._pairing import PairingError, PairingStore, PendingCode

__all__ = ["channels_app", "pair_code", "pending_codes"]

channels_app = typer.Typer(
    help=(
        "Run the chat channels of ship.json (Telegram, Slack, Discord, Feishu / Lark, QQ) "
        "and approve who may talk to the agent."
    ),
    no_args_is_help=True,
)
_out = Console(soft_wrap=True)
_err = Console(stderr=True, soft_wrap=True)


def _store(project: Path) -> PairingStore:
    return PairingStore(ShipPaths(project.expanduser().resolve()).ship_dir / "channels")


def pending_codes(project: Path) -> list[PendingCode]:
    """The pairing codes waiting for approval in ``project`` (what ``channels pending`` lists)."""
    return _store(project).pending()


def pair_code(project: Path, code: str) -> PendingCode:
    """Approve the sender behind ``code`` (what ``channels pair`` does).

    Raises:
        PairingError: the code is unknown, used or expired.
    """
    return _store(project).pair(code)


@channels_app.command("pending")
def pending_command(project: ProjectOpt = Path(".")) -> None:
    """List the pairing codes waiting for approval (each valid for one hour)."""
    try:
        rows = pending_codes(project)
    except ShipAgentError as exc:
        _err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if not rows:
        _out.print("no pending pairing codes")
        return
    for row in rows:
        minutes = max(0, int((row.expires_at - time.time()) // 60))
        _out.print(
            f"{row.code}  {row.channel}  {escape(row.sender_name)} (id {row.sender_id})  "
            f"expires in {minutes} min"
        )


@channels_app.command("pair")
def pair_command(
    code: Annotated[str, typer.Argument(help="The code the bot gave the sender.")],
    project: ProjectOpt = Path("."),
) -> None:
    """Approve the sender behind a pairing code; their next message reaches the agent."""
    try:
        row = pair_code(project, code)
    except (PairingError, ShipAgentError) as exc:
        _err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    _out.print(f"paired {escape(row.sender_name)} (id {row.sender_id}) on {row.channel}")


@channels_app.command("run")
def run_command(
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Model string overriding ship.json llm.model.")
    ] = None,
    model_factory: Annotated[str | None, typer.Option(help=FACTORY_HELP)] = None,
    project: ProjectOpt = Path("."),
    no_worker: Annotated[
        bool,
        typer.Option(
            "--no-worker", help="Durable mode: only enqueue turns; `shipagent worker`s answer them."
        ),
    ] = False,
) -> None:
    """Run the channels enabled in ship.json (no HTTP server) until Ctrl-C or SIGTERM."""

    from ..cli._model_factory import host_agent
    from ._host import ChannelHost

    try:
        agent = host_agent(project, model, model_factory)  # as `serve` builds it
        if no_worker:  # durable mode: this process enqueues; workers run the turns and reply
            agent.turn_executor_options = {"worker": False}
        host = ChannelHost(agent)  # an enabled platform without its extra: a ConfigError
    except ShipAgentError as exc:
        _err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if not host.channels:
        _err.print(
            "[bold red]error:[/] no channel is enabled: set channels.telegram.enabled to true in ship.json "
            "(or the enabled key of channels.slack, channels.discord, channels.feishu or channels.qq)"
        )
        raise typer.Exit(2)
    log_to_stderr()

    async def main() -> None:
        async with agent, host:
            for name, health in host.health.items():
                _err.print(f"{name}: running {escape(health.details.get('bot', ''))}")
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:  # stop: answers already accepted finish first (for a while)
                    break

    try:
        anyio.run(main)
    except KeyboardInterrupt:
        _err.print("[dim]stopped[/]")
    except Exception as exc:  # a start failure (token refused, server unreachable): one line
        _err.print(f"[bold red]error:[/] {escape(f'{type(exc).__name__}: {exc}')}")
        raise typer.Exit(1) from None
