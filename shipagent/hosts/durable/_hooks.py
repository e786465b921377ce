"""The durable turn's hooks: model requests and tools with effects as DBOS steps, commit once.

Plugged into :attr:`ShipAgent.turn_hooks` by a worker. Inside the turn's workflow:

* the request id is the workflow id (given by whoever enqueued the turn), never a fresh uuid, so a
  replay names the same turn;
* each model request is a step (pydantic-ai's ``DBOSModel``): a resumed turn gets the recorded
  responses back instead of asking the model again; a preemptible one, so a cancelled turn
  (``/stop``) does not wait for the model to finish;
* tools with effects are steps (:class:`~shipagent.hosts.durable._steps.StepToolset`);
* before the turn, the chat is reloaded from disk if another worker committed to it since this
  worker last looked (the last record's request id in the message log is the marker);
* the commit is one step, and the store's commit is idempotent by request id
  (:meth:`~shipagent.store.ChatStore.commit`): a crash after some parts were written and before
  DBOS recorded the step finishes the rest, writes nothing twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from dbos import DBOS
from pydantic_ai.durable_exec.dbos import DBOSModel, StepConfig
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset

from ...agent.turns import Commit, CommitOutcome, TurnCommit, TurnHooks
from ...errors import ShipAgentError
from ._steps import StepToolset

if TYPE_CHECKING:
    from ...agent._agent import ShipAgent

__all__ = ["COMMIT_STEP", "DurableTurnHooks"]

COMMIT_STEP = "shipagent.commit"
"""The name of a turn's one commit step."""

_UNSEEN = object()

MODEL_STEP = cast(StepConfig, {"preemptible": True})
"""A model request is a preemptible step: if its workflow is cancelled (``/stop``), DBOS stops the
request (it polls for cancellations about once a second) instead of waiting for the model's answer.
Nothing of a stopped request is recorded. (pydantic-ai passes the step config to ``DBOS.step``
as it is; ``StepConfig`` does not list the option yet, hence the cast.)"""


class DurableTurnHooks(TurnHooks["ShipAgent"]):
    """Turn hooks of a durable worker (one per worker process)."""

    def __init__(self) -> None:
        self._models: dict[int, tuple[Model, DBOSModel]] = {}
        self._seen: dict[str, object] = {}
        """Per chat: the message log's last request id when this worker last loaded or committed it."""

    def request_id(self, given: str | None, fresh: Callable[[], str]) -> str:
        workflow_id = DBOS.workflow_id
        return workflow_id or given or fresh()

    def model(self, model: Model) -> Model:
        if isinstance(model, DBOSModel):
            return model
        known = self._models.get(id(model))
        if known is None or known[0] is not model:
            wrapped = DBOSModel(
                model,
                step_name_prefix="shipagent",
                step_config=MODEL_STEP,
                get_event_stream_handler=lambda: None,
            )
            known = self._models[id(model)] = (model, wrapped)
        return known[1]

    def toolsets(self, toolsets: Sequence[AbstractToolset[Any]]) -> list[AbstractToolset[Any]]:
        return [StepToolset(t) for t in toolsets]

    async def load(
        self, agent: ShipAgent, chat_key: str, load: Callable[[], Awaitable[list[ModelMessage]]]
    ) -> list[ModelMessage]:
        last = (await self.store(agent).last_committed(chat_key)).request_id
        if self._seen.get(chat_key, _UNSEEN) != last:  # another worker committed since: re-read
            agent.chats.clear_memory(chat_key)
            agent.agent_context.forget(chat_key)
            self._seen[chat_key] = last
        return await load()

    @staticmethod
    async def _commit_step(write: Callable[[], Awaitable[CommitOutcome]]) -> tuple[CommitOutcome, bool]:
        """Run ``write`` as the turn's one recorded commit step; also say whether it ran here.

        ``False`` means DBOS returned the outcome an earlier attempt recorded (a replay), so this
        process's memory of the chat may be stale.
        """
        ran = False

        async def step() -> CommitOutcome:
            nonlocal ran
            ran = True
            compaction, failure = await write()
            # recorded with the step: keep it picklable whatever the original exception was
            return compaction, (ShipAgentError(f"{type(failure).__name__}: {failure}") if failure else None)

        outcome: CommitOutcome = await DBOS.run_step_async({"name": COMMIT_STEP}, step)
        return outcome, ran

    async def commit(self, agent: ShipAgent, turn: TurnCommit, commit: Commit) -> CommitOutcome:
        outcome, ran = await self._commit_step(lambda: commit(turn, self.store(agent)))
        if not ran:  # recorded by an earlier attempt: this process's memory of the chat is stale
            agent.chats.clear_memory(turn.chat_key)
        self._seen[turn.chat_key] = turn.request_id if outcome[1] is None else _UNSEEN
        return outcome
