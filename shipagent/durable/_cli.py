"""``shipagent worker`` and ``shipagent recover``: run and repair a durable project's workers.

Registered on the main typer app by ``shipagent.cli``. DBOS is imported inside the commands, so
the CLI starts without the durable extra.

Testing hook: ``--model-factory module:attr`` (or ``SHIPAGENT_MODEL_FACTORY``) names a callable
that returns the pydantic-ai model the worker uses instead of ship.json's ``llm``. Worker
subprocesses in the test suite use it to run a scripted ``FunctionModel``
(``tests/durable_support.py``); it is not meant for production, where ship.json says the model.
"""

from __future__ import annotations

import importlib
import os
import signal
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.console import Console
from rich.markup import escape

from ..agent import ShipAgent
from ..errors import ConfigError, ShipAgentError

__all__ = ["recover_command", "worker_command"]

_out = Console(soft_wrap=True)
_err = Console(stderr=True, soft_wrap=True)

ProjectOpt = Annotated[Path, typer.Option("--project", "-C", help="Project directory (holds ship.json).")]
ExecutorOpt = Annotated[
    str | None,
    typer.Option("--executor-id", help="This worker's executor id (default: <hostname>:<slot>)."),
]
FactoryOpt = Annotated[
    str | None,
    typer.Option(
        "--model-factory",
        help="TESTING HOOK: module:attr of a callable returning the model (env SHIPAGENT_MODEL_FACTORY).",
    ),
]


def _fail(message: str) -> typer.Exit:
    _err.print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(2)


def load_model_factory(spec: str | None) -> Any:
    """The model a ``module:attr`` factory returns (``None`` when no factory is named)."""
    spec = spec or os.environ.get("SHIPAGENT_MODEL_FACTORY")
    if not spec:
        return None
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--model-factory {spec!r}: expected module:attr", path="--model-factory")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--model-factory {spec!r}: {exc}", path="--model-factory") from None
    return factory()


def _durable_agent(project: Path, factory: str | None, **options: Any) -> ShipAgent:
    agent = ShipAgent.from_project(project, model=load_model_factory(factory))
    if not agent.config.durable.enabled:
        raise ConfigError(
            'ship.json: durable.enabled is not true (add "durable": {"enabled": true})',
            path="durable.enabled",
        )
    agent.turn_executor_options = {k: v for k, v in options.items() if v is not None}
    return agent


def worker_command(
    project: ProjectOpt = Path("."),
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", min=1, help="Turns this worker runs at once (per worker).")
    ] = None,
    executor_id: ExecutorOpt = None,
    model_factory: FactoryOpt = None,
) -> None:
    """Run a durable worker: execute queued turns of this project until SIGTERM/Ctrl-C."""
    try:
        agent = _durable_agent(
            project, model_factory, worker=True, concurrency=concurrency, executor_id=executor_id
        )
    except ShipAgentError as exc:
        raise _fail(str(exc)) from None

    async def serve() -> None:
        async with agent:
            executor: Any = agent.turn_executor
            _out.print(
                f"worker {escape(str(executor.executor_id))} ready on "
                f"{escape(executor.settings.redacted_url())}",
                highlight=False,
            )
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    break
            _out.print("worker stopping", highlight=False)

    try:
        anyio.run(serve)
    except ShipAgentError as exc:
        raise _fail(str(exc)) from None


def recover_command(
    project: ProjectOpt = Path("."),
    executor: Annotated[
        list[str] | None,
        typer.Option("--executor", help="Executor id whose pending turns to resume (repeatable)."),
    ] = None,
) -> None:
    """Resume pending turns of dead workers now (default: every executor with a stale heartbeat)."""
    try:
        agent = ShipAgent.from_project(project)
        if not agent.config.durable.enabled:
            raise ConfigError("ship.json: durable.enabled is not true", path="durable.enabled")
        from dbos import DBOSClient

        from ._heartbeat import Heartbeats
        from ._runtime import recover_executors
        from ._settings import APP_NAME, resolve_settings

        settings = resolve_settings(agent.config.durable, agent.project_root)
        beats = Heartbeats(settings)
        ages = beats.ages()
        targets = list(executor or [e for e, age in ages.items() if age > settings.recover_after_seconds])
        client = DBOSClient(system_database_url=settings.database_url, application_name=APP_NAME)
        try:
            ids = recover_executors(client._sys_db, targets)
        finally:
            client.destroy()
        for target in targets:
            if not executor:
                beats.claim(target, settings.recover_after_seconds)
        beats.close()
    except ShipAgentError as exc:
        raise _fail(str(exc)) from None
    except Exception as exc:
        raise _fail(f"durable database {type(exc).__name__}: {exc}") from None
    for target in targets:
        age = ages.get(target)
        seen = f"last heartbeat {age:.0f}s ago" if age is not None else "no heartbeat row"
        _out.print(f"executor {escape(target)}: {seen}", highlight=False)
    _out.print(f"resumed {len(ids)} pending turn(s)", highlight=False)
