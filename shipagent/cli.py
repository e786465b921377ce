"""The ``shipagent`` command: a thin typer layer over the Python API.

User mistakes (bad ship.json, bad chat key, missing model) print one ``error:`` line and exit
with status 2; a failed run exits with 1. Tracebacks are for bugs only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer
from rich.console import Console
from rich.markup import escape

from ._lazycli import LazyGroup, lazy_subcommand
from .config import ShipConfig, load_config
from .errors import ShipAgentError
from .skills import skills_check_hook

if TYPE_CHECKING:  # pydantic-ai and the agent load when a command needs them, not for --help
    from .agent import ShipAgent
    from .execution import ApprovalRequest
    from .results import AgentResult, StepEvent

__all__ = ["app", "main"]

app = typer.Typer(
    name="shipagent",
    help="Run chat agents whose context stays bounded, inspectable and never silently lost.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)
# shipagent mcp list; shipagent context list|export|import — imported when used
lazy_subcommand("mcp", "shipagent.mcp._cli", "mcp_app", "Inspect the MCP servers declared in ship.json.")
lazy_subcommand(
    "context",
    "shipagent.files._cli",
    "context_app",
    "List, export and import a chat's context files (spilled outputs, compacted history, catalog).",
)
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

ProjectOpt = Annotated[Path, typer.Option("--project", "-C", help="Project directory (holds ship.json).")]
ChatKeyOpt = Annotated[str, typer.Option("--chat-key", "-k", help="Which conversation to use.")]
ModelOpt = Annotated[
    str | None, typer.Option("--model", "-m", help="Model string overriding ship.json llm.model.")
]

AgentFactory = Callable[..., "ShipAgent"]
agent_factory: AgentFactory | None = None
"""How the CLI builds agents (``None``: ``ShipAgent.from_project``); tests swap it to script the model."""


def _fail(message: str, code: int = 2) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


def _make_agent(project: Path, model: str | None, **kwargs: Any) -> ShipAgent:
    factory = agent_factory
    if factory is None:
        from .agent import ShipAgent

        factory = ShipAgent.from_project
    try:
        return factory(project, model=model, **kwargs)
    except ShipAgentError as exc:
        raise _fail(str(exc)) from None


@app.command()
def init(
    directory: Annotated[Path, typer.Argument(help="Where to create the project.")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
) -> None:
    """Create a project: ship.json, Agent.md, skills/ and .ship/."""
    scaffold = resources.files("shipagent").joinpath("scaffold")
    targets = {
        "ship.json": "ship.json",
        "Agent.md": "Agent.md",
        "skills/summarize/SKILL.md": "skills/summarize/SKILL.md",
    }
    existing = [name for name in targets if (directory / name).exists()]
    if existing and not force:
        raise _fail(f"{directory}: {', '.join(existing)} already exist; use --force to overwrite")
    for source, target in targets.items():
        path = directory / target
        path.parent.mkdir(parents=True, exist_ok=True)
        text = scaffold.joinpath(source).read_text(encoding="utf-8")
        if target == "ship.json":
            text = text.replace('"name": "demo"', json.dumps({"name": directory.resolve().name})[1:-1])
        path.write_text(text, encoding="utf-8")
    ship = directory / ".ship"
    ship.mkdir(exist_ok=True)
    (ship / "ship.schema.json").write_text(
        json.dumps(ShipConfig.model_json_schema(by_alias=True), indent=2), encoding="utf-8"
    )
    console.print(f"created [bold]{escape(str(directory))}[/]: ship.json, Agent.md, skills/, .ship/")
    console.print("next: set OPENAI_API_KEY (or edit llm in ship.json), then `shipagent chat`")


def _result_json(result: AgentResult) -> str:
    data = asdict(result)
    data["usage"] = {
        "requests": result.usage.requests,
        "inputTokens": result.usage.input_tokens,
        "outputTokens": result.usage.output_tokens,
        "toolCalls": result.usage.tool_calls,
    }
    return json.dumps(data, ensure_ascii=False, indent=2, default=str)


@app.command()
def run(
    text: Annotated[str, typer.Argument(help="What the user says.")],
    chat_key: ChatKeyOpt = "cli:default",
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole result as JSON.")] = False,
    model: ModelOpt = None,
    project: ProjectOpt = Path("."),
) -> None:
    """Run one turn and print the answer."""
    agent = _make_agent(project, model)

    async def go() -> AgentResult:
        async with agent:
            return await agent.run(chat_key, text)

    try:
        result = anyio.run(go)
    except ShipAgentError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        typer.echo(_result_json(result))
    else:
        typer.echo(result.output)
    if not result.success:
        raise typer.Exit(1)


def _print_step(event: StepEvent) -> None:
    if event.type == "step_finish":
        console.print(f"[dim]· {escape(event.text)}[/]")
    elif event.type == "assistant":
        console.print(f"[cyan]{escape(event.text)}[/]")
    elif event.type == "compaction":
        console.print(f"[yellow]· {escape(event.text)}[/]")


def _ask(request: ApprovalRequest) -> bool:
    return typer.confirm(f"Allow {request.tool} to run `{request.command}`?", default=False)


class _ConsoleChannel:
    """The CLI chat's channel: ``chat_send`` texts are printed as they are sent."""

    async def send_text(self, chat_key: str, text: str) -> None:
        console.print(f"[bold green]{escape(text)}[/]")


@app.command()
def chat(
    chat_key: ChatKeyOpt = "cli:default",
    model: ModelOpt = None,
    project: ProjectOpt = Path("."),
) -> None:
    """Talk to the agent. Commands: /exit, /clear, /history."""
    agent = _make_agent(project, model, on_approval=_ask)
    console.print(f"[bold]{escape(agent.config.name)}[/] — chat key {escape(chat_key)}; /exit to leave")

    async def loop() -> None:
        async with agent:
            while True:
                try:
                    line = await anyio.to_thread.run_sync(lambda: console.input("[bold]> [/]"))
                except (EOFError, KeyboardInterrupt):
                    break
                text = line.strip()
                if not text:
                    continue
                if text == "/exit":
                    break
                if text == "/clear":
                    await agent.clear(chat_key)
                    console.print("[dim]context cleared (the transcript on disk is kept)[/]")
                    continue
                if text == "/history":
                    for entry in agent.transcript.last(chat_key, 20):
                        console.print(f"[dim]{escape(entry['role'])}:[/] {escape(entry['text'])}")
                    continue
                result = await agent.run(chat_key, text, on_step=_print_step, channel=_ConsoleChannel())
                if not result.success:
                    console.print(f"[red]{escape(result.output)}[/]")

    try:
        anyio.run(loop)
    except ShipAgentError as exc:
        raise _fail(str(exc)) from None


@app.command()
def check(project: ProjectOpt = Path(".")) -> None:
    """Validate ship.json and print what the agent will use."""
    try:
        config = load_config(project.resolve())
    except ShipAgentError as exc:
        raise _fail(str(exc)) from None
    history = config.context.chat_history
    console.print(f"[bold]ship.json OK[/] — {escape(config.name)}")
    from .models import describe_model

    console.print(f"model: {escape(describe_model(config.llm))}")
    console.print(
        f"history: {history.in_memory_max_messages} messages in memory, keep "
        f"{history.compact_keep_last_messages} on compaction, {history.max_history_tokens} tokens per request"
    )
    agent_md = project / "Agent.md"
    console.print(f"Agent.md: {'found' if agent_md.is_file() else 'missing (no role prompt)'}")
    for name, server in config.mcp.servers.items():
        state = "enabled" if server.enabled else "disabled"
        console.print(f"mcp server {escape(name)}: {server.type}, {state}")
    for module in config.tools.modules:
        console.print(f"tool module: {escape(module)}")
    for hook in check_hooks:
        hook(project.resolve(), config, console)


CheckHook = Callable[[Path, ShipConfig, Console], None]
check_hooks: list[CheckHook] = []
"""Extra reports for ``shipagent check`` (skills, MCP, …) registered by subsystems."""
check_hooks.append(skills_check_hook)


@app.command()
def schema() -> None:
    """Print the JSON schema of ship.json."""
    typer.echo(json.dumps(ShipConfig.model_json_schema(by_alias=True), indent=2))


def main() -> None:
    """Console-script entry point."""
    app()
