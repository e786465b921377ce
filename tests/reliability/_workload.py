"""The workload of the SIGKILL harness: a zygote that forks agent processes on demand.

Run as ``python _workload.py PROJECT``. Importing Python, pydantic-ai and shipagent costs seconds,
a fork costs milliseconds, so the zygote imports once and, for every ``go SEED`` line on stdin,
forks a child that opens the project and runs turns until it is killed. The protocol on stdout
(one ``os.write`` per line, so lines never interleave):

- ``child PID`` — the zygote forked a child;
- ``ready PID`` — the child holds the project (``async with agent``) and starts its turns;
- ``ack KEY N`` — turn ``N`` of chat ``KEY`` returned ``success=True`` (printed only after);
- ``fail KEY N TEXT`` — a turn failed (the harness treats it as a defect);
- ``dead PID STATUS`` — the zygote reaped the child: every line the child wrote is above this one.

Each chat's turns are numbered from 0 and a child continues each chat after the last turn its
transcript holds, so the stores must hold exactly turns ``0..N`` of every chat, in order. Turns
mix plain answers, a small tool call and a tool output big enough to be spilled into a context
file; ``inMemoryMaxMessages`` is small, so compactions happen every few turns.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import anyio
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from shipagent import ShipAgent

KEYS = ("rel:chat:a", "rel:chat:b", "rel:chat:c", "rel:chat:d")
SHIP = {
    "context": {
        "chatHistory": {"inMemoryMaxMessages": 6, "compactKeepLastMessages": 2},
        "agentContext": {"windowEntries": 100000},
        "files": {"spillThresholdBytes": 1024},
    }
}


def kind_of(key: str, n: int) -> str:
    """The deterministic kind of turn ``n`` of ``key``: plain, tool or spill."""
    return random.Random(f"{key}/{n}").choice(("plain", "tool", "spill"))


def text_of(key: str, n: int) -> str:
    return f"turn {n} {kind_of(key, n)}"


def note(n: int) -> str:
    """Note a number."""
    return f"noted {n}"


def big_output(n: int) -> str:
    """Produce a large output (spilled into a context file)."""
    return "\n".join(f"line {i} of the big output of turn {n}" for i in range(120))


def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    prompt = next(
        (
            p.content
            for m in reversed(messages)
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, UserPromptPart)
        ),
        "",
    )
    assert isinstance(prompt, str)
    _, n, kind = prompt.split()
    if any(isinstance(p, ToolReturnPart) for p in last.parts):
        return ModelResponse(parts=[TextPart(f"done {n}")])
    if kind == "tool":
        return ModelResponse(parts=[ToolCallPart("note", {"n": int(n)}, tool_call_id=f"c{n}")])
    if kind == "spill":
        return ModelResponse(parts=[ToolCallPart("big_output", {"n": int(n)}, tool_call_id=f"c{n}")])
    return ModelResponse(parts=[TextPart(f"plain {n}")])


def make_agent(project: Path) -> ShipAgent:
    return ShipAgent.from_project(
        project, model=FunctionModel(reply), toolsets=[FunctionToolset([note, big_output])]
    )


def next_turn(agent: ShipAgent, key: str) -> int:
    """One past the newest turn the chat's transcript holds (after hydration reconciled it)."""
    for entry in reversed(agent.transcript.last(key, 20)):
        if entry.get("role") == "user":
            return int(str(entry["text"]).split()[1]) + 1
    return 0


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


async def chat_loop(agent: ShipAgent, key: str) -> None:
    await agent.chats.aget(key)  # hydrate: reconciles the logs after a kill
    n = next_turn(agent, key)
    while True:
        result = await agent.run(key, text_of(key, n))
        if not result.success:
            say(f"fail {key} {n} {json.dumps(result.output[:300])}")
            os._exit(3)
        say(f"ack {key} {n}")
        n += 1


async def child(project: Path) -> None:
    async with make_agent(project) as agent:
        say(f"ready {os.getpid()}")
        async with anyio.create_task_group() as tg:
            for key in KEYS:
                tg.start_soon(chat_loop, agent, key)


def zygote(project: Path) -> None:
    # Warm what the first turn would load lazily (the tokenizer): each child then starts working
    # at once. Nothing here starts a thread, so forking stays safe.
    from shipagent.window.tokens import count_tokens

    count_tokens("warm up the tokenizer")
    for line in sys.stdin:
        if line.strip() == "quit":
            return
        pid = os.fork()
        if pid == 0:
            try:
                anyio.run(child, project)
            finally:
                os._exit(4)
        say(f"child {pid}")
        _, status = os.waitpid(pid, 0)
        say(f"dead {pid} {status}")


if __name__ == "__main__":
    root = Path(sys.argv[1])
    (root / "ship.json").write_text(json.dumps(SHIP), encoding="utf-8")
    zygote(root)
