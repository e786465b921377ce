"""``shipagent serve``: the project's agent as an HTTP server (uvicorn), and its ``check`` line.

Without ``serve.apiKeys`` in ship.json the server answers anyone who can reach it, so it only
listens on loopback; ``--host 0.0.0.0`` without keys is refused before anything starts. On SIGTERM
(or Ctrl-C) uvicorn stops accepting connections, lets running turns finish for up to
``serve.shutdownGraceSeconds``, cancels the rest, and the app's lifespan then stops the agent's
MCP servers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Protocol

import typer
from rich.markup import escape

from ...config import ShipConfig
from ...errors import ShipAgentError
from ..cli._model_factory import FACTORY_HELP, host_agent, load_model_factory
from ..cli._opts import ProjectOpt, err, fail, log_to_stderr
from ._auth import is_loopback
from ._conn import uvicorn_options

__all__ = ["load_model_factory", "serve", "serve_check_hook"]


class _Printer(Protocol):
    def print(self, *objects: Any) -> None: ...


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on; non-loopback needs serve.apiKeys.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Model string overriding ship.json llm.model.")
    ] = None,
    model_factory: Annotated[
        str | None,
        typer.Option(help=FACTORY_HELP),
    ] = None,
    project: ProjectOpt = Path("."),
    no_worker: Annotated[
        bool,
        typer.Option("--no-worker", help="Durable mode: only enqueue turns; `shipagent worker`s run them."),
    ] = False,
    no_http: Annotated[
        bool,
        typer.Option("--no-http", help="Run only the chat channels ship.json enables (no HTTP server)."),
    ] = False,
) -> None:
    """Serve the agent over HTTP (REST + SSE, OpenAI-compatible, a web page) and its chat channels."""
    if no_http:  # the channels alone: what `shipagent channels run` does
        from ..channels._cli import run_command

        run_command(model=model, model_factory=model_factory, project=project, no_worker=no_worker)
        return
    import uvicorn

    from ..channels._host import require_platform_libraries
    from ._app import create_app

    try:
        agent = host_agent(project, model, model_factory)
        if no_worker:  # durable mode: this process enqueues; workers execute
            agent.turn_executor_options = {"worker": False}
        require_platform_libraries(agent.config.channels)  # said here, not as a startup traceback
        app = create_app(agent)
    except ShipAgentError as exc:
        raise fail(str(exc)) from None
    settings = agent.config.serve
    if not settings.api_keys and not is_loopback(host):
        err.print(
            f"[bold red]error:[/] refusing to listen on {escape(host)} without API keys: anyone who can "
            "reach it could use the agent. Add serve.apiKeys to ship.json "
            '(e.g. {"key": "${WEB_KEY}", "chatKeys": ["web:*"]}) or use --host 127.0.0.1.'
        )
        raise typer.Exit(2)
    log_to_stderr()
    shown = f"[{host}]" if ":" in host else host
    err.print(f"serving [bold]{escape(agent.config.name)}[/] on http://{escape(shown)}:{port}/")
    uvicorn.run(
        app,
        host=host,
        port=port,
        access_log=False,  # shipagent's access log has one line per request, without keys
        timeout_graceful_shutdown=math.ceil(settings.shutdown_grace_seconds),
        log_level="warning",
        # header size, header/body deadlines, keep-alive (serve.limits.keepAliveSeconds: 30 s by
        # default, longer than clients keep idle connections, so a client never sends on a
        # connection the server is closing at the same moment), connection counts
        **uvicorn_options(settings),
    )


def serve_check_hook(project_root: Path, config: ShipConfig, console: _Printer) -> None:
    """A ``shipagent check`` line (``cli.check_hooks``): who ``shipagent serve`` would answer."""
    keys = config.serve.api_keys
    if not keys:
        console.print("serve: no API keys (serve.apiKeys): `shipagent serve` listens on loopback only")
        return
    scopes = sorted({p for k in keys for p in (k.chat_keys or ["*"])})
    console.print(escape(f"serve: {len(keys)} API key(s) for chats {', '.join(scopes)}"))
