"""``shipagent worker`` and ``shipagent recover``: run and repair a durable project's workers.

Registered on the main typer app by ``shipagent.hosts.cli._app``. DBOS is imported inside the commands, so
the CLI starts without the durable extra.

``--model-factory MODULE:ATTR`` (or ``SHIPAGENT_MODEL_FACTORY``) is the same hook as
``shipagent serve``'s (:mod:`shipagent.hosts.cli._model_factory`): worker subprocesses in the test suite run
a scripted ``FunctionModel`` through it (``tests/support/durable_worker.py``).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.markup import escape

from ...agent._agent import ShipAgent
from ...errors import ConfigError, ShipAgentError
from ..cli._model_factory import FACTORY_HELP, load_model_factory
from ..cli._opts import ProjectOpt, fail, log_to_stderr, out

__all__ = ["recover_command", "worker_command"]


ExecutorOpt = Annotated[
    str | None,
    typer.Option(
        "--executor-id",
        help="This worker's executor id (default: the first <hostname>:<n> no live worker holds).",
    ),
]
FactoryOpt = Annotated[str | None, typer.Option("--model-factory", help=FACTORY_HELP)]


def _durable_agent(project: Path, factory: str | None, **options: Any) -> ShipAgent:
    agent = ShipAgent.from_project(project, model=load_model_factory(factory, project))
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
        int | None,
        typer.Option(
            "--concurrency",
            min=1,
            help="Turns a worker runs at once (stored with the queue: the last worker given it sets it for all).",
        ),
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
        raise fail(str(exc)) from None
    log_to_stderr()

    async def serve() -> None:
        async with agent:
            executor: Any = agent.turn_executor
            out.print(
                f"worker {escape(str(executor.executor_id))} ready on "
                f"{escape(executor.settings.redacted_url())}",
                highlight=False,
            )
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    break
            out.print("worker stopping", highlight=False)

    try:
        anyio.run(serve)
    except ShipAgentError as exc:
        raise fail(str(exc)) from None


def recover_command(
    project: ProjectOpt = Path("."),
    executor: Annotated[
        list[str] | None,
        typer.Option("--executor", help="Executor id whose pending turns to resume (repeatable)."),
    ] = None,
) -> None:
    """Resume pending turns of dead workers now (default: every executor found dead)."""
    try:
        agent = ShipAgent.from_project(project)
        if not agent.config.durable.enabled:
            raise ConfigError("ship.json: durable.enabled is not true", path="durable.enabled")
        from dbos import DBOSClient

        from ._heartbeat import RECOVERING, Heartbeats, this_process
        from ._runtime import recover_executors
        from ._settings import APP_NAME, resolve_settings

        settings = resolve_settings(agent.config.durable, agent.project_root)
        beats = Heartbeats(settings)
        rows = {row.executor_id: row for row in beats.rows()}
        me, after = this_process(), settings.recover_after_seconds
        if executor:  # named by hand: declared dead whatever the heartbeat says
            targets = [e for e in executor if e not in rows or beats.take_over(rows[e], me, 0.0)]
        else:  # the dead ones nobody is resuming already (one winner each)
            targets = [
                r.executor_id for r in rows.values() if r.dead(after) and beats.take_over(r, me, after)
            ]
        client = DBOSClient(system_database_url=settings.database_url, application_name=APP_NAME)
        try:
            ids = recover_executors(client._sys_db, targets)
        finally:
            client.destroy()
        for target in targets:  # its turns are back on the queue
            beats.forget(target, RECOVERING + me.owner)
        beats.close()
    except ShipAgentError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:
        raise fail(f"durable database {type(exc).__name__}: {exc}") from None
    for target in targets:
        row = rows.get(target)
        seen = f"last heartbeat {row.age:.0f}s ago" if row is not None else "no heartbeat row"
        out.print(f"executor {escape(target)}: {seen}", highlight=False)
    out.print(f"resumed {len(ids)} pending turn(s)", highlight=False)
