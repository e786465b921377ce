"""The one pipeline every channel shares: accept, admit, command, queue, answer.

An adapter calls :meth:`Pipeline.accept` for each inbound message and confirms the message to its
platform only after it returns (the dedupe record is on disk by then). Accepting is quick; the
answer runs in the pipeline's own tasks, one turn at a time per chat key, in arrival order, so a
slow answer in one chat never holds up the poll or another chat. ``/stop`` and ``/status`` are
answered at once; ``/new`` waits its turn in the queue like a message (it clears what came before).
How a turn's answer is written into the chat is :mod:`._answer`'s.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Self

import anyio
import anyio.abc

from ._access import NOT_ADDRESSED, AccessRules, Decision, decide
from ._answer import Answerer
from ._approvals import ApprovalDesk
from ._commands import (
    NOTHING_RUNNING,
    PIN_COMMANDS,
    Command,
    help_text,
    parse_command,
    pin_command,
    status_text,
)
from ._dedupe import Dedupe
from ._delivery import with_plain_fallback
from ._durable import durable_queue, queued_state, stop_turn
from ._options import ChannelSettings, PipelineOptions
from ._pairing import PairingStore
from ._types import (
    ButtonPress,
    ChannelHealth,
    InboundMessage,
    Outbound,
    PermanentSendError,
    TransientSendError,
)
from ._unaddressed import GroupChatter
from ._writer import Pacer

if TYPE_CHECKING:
    from ...agent._agent import ShipAgent

__all__ = ["ChannelSettings", "Pipeline", "PipelineOptions"]

log = logging.getLogger("shipagent.hosts.channels")


@dataclass(slots=True)
class _Chat:
    """One chat's queue: messages waiting, and the turn running now (to stop it)."""

    waiting: deque[tuple[InboundMessage, Command | None]] = field(default_factory=deque)
    running: anyio.CancelScope | None = None
    busy: bool = False
    pacer: Pacer = field(default_factory=Pacer)
    last_arrival: float = float("-inf")


class Pipeline:
    """Access, dedupe, commands, per-chat queueing and the reply of one channel."""

    def __init__(
        self,
        agent: ShipAgent,
        outbound: Outbound,
        *,
        channel: str,
        rules: AccessRules,
        pairing: PairingStore,
        dedupe: Dedupe,
        health: ChannelHealth,
        options: PipelineOptions | None = None,
        admins: frozenset[str] = frozenset(),
    ) -> None:
        self.agent = agent
        self.outbound = outbound
        self.channel = channel
        self.rules = rules
        self.pairing = pairing
        self.dedupe = dedupe
        self.health = health
        self.options = options or PipelineOptions()
        self.bot_username: str | None = None
        self.approvals = ApprovalDesk(agent, outbound, admins)
        self._chats: dict[str, _Chat] = {}
        self._tasks: anyio.abc.TaskGroup | None = None
        self._idle = anyio.Event()  # set whenever a chat's queue ran empty
        self._stopping = False  # past the grace: what is being answered now is answered after a restart
        self._senders: dict[str, deque[float]] = {}  # sender -> arrival times of the last minute
        self._warned: set[str] = set()
        self.chatter = GroupChatter(self.options.history_limit)
        self.answers = Answerer(
            agent,
            outbound,
            channel,
            dedupe=dedupe,
            approvals=self.approvals,
            chatter=self.chatter,
            health=health,
        )

    async def __aenter__(self) -> Self:
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        for payload in await self.dedupe.unfinished():  # accepted before a crash, never answered
            message = InboundMessage.from_json(payload)
            log.info(
                "%s: answering message %s of chat %s, accepted before a restart",
                self.channel,
                message.message_id,
                message.chat_id,
            )
            self._enqueue(message, parse_command(message.text, self.bot_username))
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._tasks is not None
        with anyio.move_on_after(self.options.stop_grace):  # answer what was accepted, for a while
            while any(chat.busy for chat in self._chats.values()):
                self._idle = anyio.Event()
                await self._idle.wait()
        self._stopping = True
        self._tasks.cancel_scope.cancel()
        return await self._tasks.__aexit__(kind, exc, tb)

    # -- inbound ----------------------------------------------------------------------------------

    async def accept(self, message: InboundMessage) -> None:
        """Take ``message`` in; when this returns it is recorded and the platform may forget it.

        A message that will be answered is recorded with its content until it is answered, so a
        process killed meanwhile answers it after its restart (see :meth:`__aenter__`).
        """
        command = parse_command(message.text, self.bot_username)
        decision = await decide(message, self.rules, self.pairing, is_command=command is not None)
        if decision.action == "allow" and not self._within_rate(message):
            decision = Decision("ignore", "over the per-sender rate limit")
        queued = decision.action == "allow" and (command is None or command.name == "new")
        payload = message.to_json() if queued else None
        if not await self.dedupe.accept(message.chat_id, message.message_id, payload):
            log.info(
                "%s: message %s of chat %s seen before; ignored",
                self.channel,
                message.message_id,
                message.chat_id,
            )
            return
        self.health.last_inbound_at = time.time()
        if decision.action == "ignore":
            log.debug("%s: message from %s ignored: %s", self.channel, message.sender_id, decision.reason)
            if decision.reason == NOT_ADDRESSED:
                self.chatter.keep(message)
        elif decision.action == "pair":
            assert decision.code is not None
            self._spawn(self._say, message, _pairing_text(decision.code.code, self.channel))
        elif command is not None and command.name == "stop":
            self._stop(message)
        elif command is not None and command.name in ("start", "help", "status", *PIN_COMMANDS):
            self._spawn(self._command, message, command)
        else:
            self._enqueue(message, command)

    def running(self, chat_key: str) -> bool:
        """Whether an answer is being written in the chat (what ``/stop`` would stop)."""
        chat = self._chats.get(chat_key)
        return chat is not None and chat.running is not None

    def _within_rate(self, message: InboundMessage) -> bool:
        """Whether the sender is within ``rate_per_minute``; the first message over it gets a notice."""
        limit = self.options.rate_per_minute
        if limit <= 0:
            return True
        now = time.monotonic()
        recent = self._senders.setdefault(message.sender_id, deque())
        while recent and recent[0] <= now - 60:
            recent.popleft()
        if len(recent) >= limit:
            if message.sender_id not in self._warned:
                self._warned.add(message.sender_id)
                self._spawn(self._say, message, "You are writing faster than I can answer; wait a minute.")
            return False
        self._warned.discard(message.sender_id)
        recent.append(now)
        return True

    def _enqueue(self, message: InboundMessage, command: Command | None) -> None:
        chat = self._chats.setdefault(message.chat_key, _Chat())
        chat.last_arrival = time.monotonic()
        chat.waiting.append((message, command))
        self.health.backlog += 1
        if not chat.busy:
            chat.busy = True
            self._spawn(self._drain, message.chat_key)

    def _spawn(self, func: Callable[..., Awaitable[None]], *args: object) -> None:
        """Run ``func(*args)`` in the pipeline's tasks; its failure is logged, never fatal to others."""
        if self._tasks is None:
            raise RuntimeError("use the pipeline inside `async with pipeline:`")

        async def guarded() -> None:
            try:
                await func(*args)
            except Exception as exc:
                self.health.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("%s: %s failed", self.channel, getattr(func, "__name__", "a task"))

        self._tasks.start_soon(guarded)

    async def press(self, press: ButtonPress) -> None:
        """A button was pressed (an approval); when this returns the press is recorded."""
        if not await self.dedupe.accept(press.chat_id, f"press:{press.press_id}"):
            return
        self._spawn(self._press, press)

    async def _press(self, press: ButtonPress) -> None:
        try:
            await self.approvals.press(press)
        except (TransientSendError, PermanentSendError) as exc:
            self.health.last_error = f"could not answer a button press in chat {press.chat_id}: {exc}"
            log.error("%s: %s", self.channel, self.health.last_error)

    # -- commands ---------------------------------------------------------------------------------

    def _stop(self, message: InboundMessage) -> None:
        if (queue := durable_queue(self.agent)) is not None:  # the turn runs on a worker: cancel it there
            self._spawn(stop_turn, queue, self.outbound, self.channel, message, self.options.limit)
            return
        chat = self._chats.get(message.chat_key)
        if chat is not None and chat.running is not None:
            chat.running.cancel()
        else:
            self._spawn(self._say, message, NOTHING_RUNNING)

    async def _command(self, message: InboundMessage, command: Command) -> None:
        if command.name == "start":
            await self._say(message, "Hello! " + help_text())
        elif command.name == "help":
            await self._say(message, help_text())
        elif command.name in PIN_COMMANDS:
            await self._say(message, await pin_command(self.agent, message.chat_key, command))
        else:
            await self._say(message, await self._status(message))

    async def _status(self, message: InboundMessage) -> str:
        chat = self._chats.get(message.chat_key)
        queue = durable_queue(self.agent)  # durable: the turns run on workers, the queue knows
        state = await queued_state(queue, self.channel, message) if queue is not None else None
        return await status_text(
            self.agent, message.chat_key, running=bool(chat and chat.running), health=self.health, state=state
        )

    async def _say(self, message: InboundMessage, text: str) -> None:
        try:
            await with_plain_fallback(lambda fmt: self.outbound.send(message, text, formatted=fmt))
        except (TransientSendError, PermanentSendError) as exc:
            self.health.last_error = f"could not send to chat {message.chat_id}: {exc}"
            log.error("%s: %s", self.channel, self.health.last_error)

    # -- turns ------------------------------------------------------------------------------------

    async def _drain(self, chat_key: str) -> None:
        chat = self._chats[chat_key]
        try:
            while chat.waiting:
                message, command = chat.waiting.popleft()
                batch = [message]
                cut = False  # by the pipeline stopping: the batch stays to be answered after a restart
                try:
                    if command is not None and command.name == "new":
                        await self.agent.clear(chat_key)
                        await self._say(message, "Started afresh: the model's context is empty.")
                    else:
                        await self._quiet(chat, message)
                        while _same_burst(chat.waiting, message):  # one turn for a burst
                            batch.append(chat.waiting.popleft()[0])
                        await self.answers.answer(chat, batch, self.options)
                except Exception as exc:  # one message's failure never stops the chat's queue
                    self.health.last_error = f"{type(exc).__name__}: {exc}"
                    log.exception("%s: answering chat %s failed", self.channel, chat_key)
                except anyio.get_cancelled_exc_class():
                    cut = self._stopping  # (a /stop is the turn's own: it ends the answer and goes on)
                    raise
                finally:
                    self.health.backlog -= len(batch)
                    with anyio.CancelScope(shield=True):
                        for done in [] if cut else batch:  # cut: its record (and streamed message) stay
                            await self.dedupe.done(done.chat_id, done.message_id)
        finally:
            chat.busy = False
            self._idle.set()

    async def _quiet(self, chat: _Chat, message: InboundMessage) -> None:
        """Debounce: wait until the chat has been quiet for its debounce time (groups: 1.5 s)."""
        seconds = self.options.debounce_group if message.is_group else self.options.debounce_dm
        while (wait := chat.last_arrival + seconds - time.monotonic()) > 0:  # noqa: ASYNC110 - a deadline that moves on each arrival, not a flag
            await anyio.sleep(wait)


def _same_burst(waiting: deque[tuple[InboundMessage, Command | None]], first: InboundMessage) -> bool:
    """Whether the next waiting message joins ``first``'s turn: not a command, and (in a group)
    from the same person — a turn has one sender, so each transcript line says who said it."""
    if not waiting or waiting[0][1] is not None:
        return False
    return not first.is_group or waiting[0][0].sender_id == first.sender_id


def _pairing_text(code: str, channel: str) -> str:
    return (
        "I don't know you yet. Ask my owner to approve you by running:\n"
        f"shipagent channels pair {code}\n"
        "(the code is valid for one hour)"
    )
