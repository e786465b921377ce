"""The interactive ``shipagent chat`` loop: streamed answers, a status line, Ctrl-C that behaves.

Why two threads: the terminal is read in the main thread, where Python delivers Ctrl-C as
``KeyboardInterrupt``, while the agent lives in an event loop in a second thread (an anyio
blocking portal; ``async with agent`` runs in one task there, so MCP servers start and stop in
the same task). A turn runs as a portal task consuming :meth:`ShipAgent.run_stream`; the main
thread waits for it, answers approval questions it posts, and on Ctrl-C cancels just that task —
the turn's consumer leaves, so nothing of the turn is committed and the next prompt appears. At
the prompt, Ctrl-D ends the chat and Ctrl-C raises ``KeyboardInterrupt`` once the agent stopped
(the command exits with 130, as shells expect).
"""

from __future__ import annotations

import queue
import re
import threading
from contextlib import aclosing

import click
from anyio.from_thread import BlockingPortal, start_blocking_portal
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from rich.console import Console
from rich.markup import escape
from rich.status import Status

from ...agent._agent import ShipAgent
from ...errors import ShipAgentError
from ...events import ApprovalRequired, Compacted, Done, TextDelta, ToolFinished, ToolStarted
from ...results import AgentResult, StepEvent, cut_notice
from ...tools.execution import ReplyChannel

__all__ = ["COMMANDS", "ChatLoop", "render_context"]

COMMANDS = {
    "/help": "show these commands",
    "/history": "show what the model currently sees of this chat",
    "/clear": "empty the model's context (the transcript on disk is kept)",
    "/pin": "keep a fact in every request of this chat: /pin <fact> (alone: list the pins)",
    "/unpin": "remove a pinned fact: /unpin <id>",
    "/exit": "leave (Ctrl-D or Ctrl-C at the prompt also do)",
}
_COMMAND = re.compile(r"/[A-Za-z][\w-]*")


def render_context(messages: list[ModelMessage], limit: int = 20) -> list[tuple[str, str]]:
    """The model's current context as ``(who, text)`` lines, the newest ``limit`` of them."""
    lines: list[tuple[str, str]] = []
    for message in messages:
        for part in message.parts:
            if isinstance(message, ModelRequest) and isinstance(part, UserPromptPart):
                lines.append(("user", part.content if isinstance(part.content, str) else str(part.content)))
            elif isinstance(part, SystemPromptPart):
                lines.append(("summary", part.content))
            elif isinstance(message, ModelResponse) and isinstance(part, TextPart) and part.content.strip():
                lines.append(("assistant", part.content))
            elif isinstance(part, ToolCallPart):
                lines.append(("tool", f"{part.tool_name}({part.args_as_json_str()[:200]})"))
    return lines[-limit:]


class _TurnView:
    """What one turn shows: a status line until text arrives or while a tool runs, the text itself."""

    def __init__(
        self, console: Console, *, max_tokens: int | None = None, timeout: float | None = None
    ) -> None:
        self.console = console
        self.status: Status | None = None
        self.streamed = ""
        self.max_tokens = max_tokens  # llm.maxTokens and llm.timeoutSeconds, named when an answer is cut
        self.timeout = timeout

    def wait(self, what: str) -> None:
        if self.streamed and not self.streamed.endswith("\n"):
            self.console.out("")  # the status line goes below the text, not into it
            self.streamed += "\n"
        if self.status is None:
            self.status = self.console.status(f"[dim]{escape(what)}[/]", spinner="dots")
            self.status.start()
        else:
            self.status.update(f"[dim]{escape(what)}[/]")

    def quiet(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def text(self, piece: str) -> None:
        self.quiet()
        self.console.out(piece, end="", highlight=False)
        self.streamed += piece

    def line(self, markup: str) -> None:
        if self.streamed and not self.streamed.endswith("\n"):
            self.console.out("")
            self.streamed += "\n"
        self.console.print(markup)

    def step(self, event: StepEvent) -> None:
        """``on_step``: most steps arrive as run events; a model request being retried does not."""
        if event.type not in ("assistant", "step_finish", "compaction", "done"):
            self.line(f"[yellow]· {escape(event.text)}[/]")

    def done(self, result: AgentResult) -> None:
        self.quiet()
        if self.streamed and not self.streamed.endswith("\n"):
            self.console.out("")
        if not result.success:
            self.console.print(f"[red]{escape(result.output)}[/]")
        elif not self.streamed.strip() and result.output.strip():
            self.console.print(escape(result.output), highlight=False)  # nothing streamed: say it now
        elif result.had_tool_failure and "Tool errors:" in result.output:
            self.console.print(f"[yellow]{escape(result.output[result.output.index('Tool errors:') :])}[/]")
        notice = cut_notice(result, max_tokens=self.max_tokens, timeout_seconds=self.timeout)
        if notice is not None:
            self.console.print(f"[bold yellow]✂ {escape(notice)}[/]")
        usage = result.usage
        self.console.print(
            f"[dim]tokens in {usage.input_tokens} · out {usage.output_tokens} · "
            f"{usage.requests} request{'s' if usage.requests != 1 else ''}[/]"
        )


class ChatLoop:
    """One interactive chat with ``agent`` on ``chat_key``, printing to ``console``."""

    def __init__(
        self, agent: ShipAgent, chat_key: str, console: Console, *, channel: ReplyChannel | None = None
    ) -> None:
        self.agent = agent
        self.chat_key = chat_key
        self.console = console
        self.channel = channel

    def run(self) -> None:
        """Prompt, run turns, until /exit or Ctrl-D; Ctrl-C at the prompt raises KeyboardInterrupt.

        The agent (and its MCP servers) is stopped before either returns.
        """
        with start_blocking_portal() as portal, portal.wrap_async_context_manager(self.agent):
            while True:
                try:
                    line = self.console.input("[bold]> [/]")
                except EOFError:
                    self.console.out("")
                    return
                except KeyboardInterrupt:  # leaves through the with blocks: the agent stops first
                    self.console.out("")
                    raise
                text = line.strip()
                if not text:
                    continue
                if _COMMAND.fullmatch(text.split()[0]):
                    if not self._command(text, portal):
                        return
                    continue
                self._turn(portal, text)

    def _command(self, text: str, portal: BlockingPortal) -> bool:
        """Run a /command (``text``: the whole line); ``False`` means leave."""
        name, _, argument = text.partition(" ")
        if name in ("/exit", "/quit"):
            return False
        if name == "/clear":
            portal.call(self.agent.clear, self.chat_key)
            self.console.print("[dim]context cleared (the transcript on disk is kept)[/]")
        elif name in ("/pin", "/unpin"):
            self._pins(name, argument.strip(), portal)
        elif name == "/history":
            lines = render_context(portal.call(self.agent.ahistory, self.chat_key))
            if not lines:
                self.console.print("[dim](the model's context of this chat is empty)[/]")
            for who, said in lines:
                self.console.print(f"[dim]{escape(who)}:[/] {escape(said)}")
            where = self.agent.transcript.path(self.chat_key)
            self.console.print(
                f"[dim]that is what the model sees now; everything said is in {escape(str(where))}[/]"
            )
        else:
            if name != "/help":
                self.console.print(f"[yellow]unknown command {escape(name)}[/]")
            for command, what in COMMANDS.items():
                self.console.print(f"  {command:<9} {escape(what)}")
        return True

    def _pins(self, name: str, argument: str, portal: BlockingPortal) -> None:
        """``/pin <fact>``, ``/unpin <id>``, and either alone: the chat's pins."""
        try:
            if name == "/pin" and argument:
                pin = portal.call(lambda: self.agent.pin(self.chat_key, argument, by="user"))
                self.console.print(f"[dim]pinned {pin.id}: {escape(pin.text)}[/]")
            elif argument:
                gone = portal.call(self.agent.unpin, self.chat_key, argument)
                self.console.print(
                    f"[dim]unpinned {escape(argument)}[/]"
                    if gone
                    else f"[yellow]no pin {escape(argument)}[/]"
                )
            pins = portal.call(self.agent.pins, self.chat_key)
        except ShipAgentError as exc:  # refused (empty, no room: the message says what to unpin)
            self.console.print(f"[yellow]{escape(str(exc))}[/]")
            return
        if not argument or name == "/unpin":
            for pin in pins:
                self.console.print("  " + escape(f"[{pin.id}] {pin.text}"), highlight=False)
            if not pins:
                self.console.print("[dim](nothing is pinned in this chat)[/]")

    def _turn(self, portal: BlockingPortal, text: str) -> None:
        questions: queue.Queue[ApprovalRequired] = queue.Queue()
        finished = threading.Event()
        future = portal.start_task_soon(self._stream, text, questions, finished)
        try:
            while not finished.is_set():
                try:
                    question = questions.get(timeout=0.05)
                except queue.Empty:
                    continue
                approved = self._confirm(question)
                portal.call(self.agent.resolve_approval, question.approval_id, approved)
            future.result()
        except KeyboardInterrupt:
            future.cancel()
            finished.wait(30)  # the turn's task unwinds: lock released, nothing committed
            self.console.print(
                "\n[yellow]turn cancelled; the chat goes on (nothing of that turn was saved)[/]"
            )

    def _confirm(self, question: ApprovalRequired) -> bool:
        try:
            return click.confirm(f"Allow {question.tool} to run `{question.command}`?", default=False)
        except click.Abort:  # Ctrl-C / Ctrl-D at the question: refuse, and cancel the turn
            raise KeyboardInterrupt from None

    async def _stream(
        self, text: str, questions: queue.Queue[ApprovalRequired], finished: threading.Event
    ) -> None:
        llm = self.agent.config.llm
        view = _TurnView(self.console, max_tokens=llm.max_tokens, timeout=llm.timeout_seconds)
        view.wait("thinking…")
        try:
            events = self.agent.run_stream(self.chat_key, text, channel=self.channel, on_step=view.step)
            async with aclosing(events) as stream:
                async for event in stream:
                    if isinstance(event, TextDelta):
                        view.text(event.text)
                    elif isinstance(event, ToolStarted):
                        view.wait(f"running {event.tool}…")
                    elif isinstance(event, ToolFinished):
                        view.quiet()
                        view.line(f"[dim]· {escape(event.summary)}[/]")
                        view.wait("thinking…")
                    elif isinstance(event, Compacted):
                        view.line(f"[yellow]· compacted {event.removed} older messages into a summary[/]")
                    elif isinstance(event, ApprovalRequired):
                        view.quiet()
                        questions.put(event)
                    elif isinstance(event, Done):
                        view.done(event.result)
        finally:
            view.quiet()
            finished.set()
