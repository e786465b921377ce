"""Context files: a huge tool result becomes a file the model pages through, greps and tails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic_ai.toolsets import FunctionToolset

from shipagent import ShipAgent


def build_log() -> str:
    """Return the full log of the last build."""
    steps = "".join(f"step {i}: compiled module_{i}.py ok\n" for i in range(50_000))
    return steps + "step 50000: FAILED writing dist/app.whl: No space left on device\n"


async def why_did_the_build_fail(project: Path, model: Any = None) -> str:
    agent = ShipAgent.from_project(project, model=model, toolsets=[FunctionToolset([build_log])])
    async with agent:
        result = await agent.run("api:chat:alice", "Why did the build fail?")
    # The 2 MB log reached the model as a ~2 KB preview (head, tail, id, size). The whole log
    # is kept as a context file the model reads with context_read / context_tail / context_grep:
    for ref in agent.context_files.list("api:chat:alice", kind="artifact"):
        print(ref.id, ref.kind, f"{ref.size_bytes:,} bytes", ref.source)
    return result.output
