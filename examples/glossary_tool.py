"""A user-written builtin tool: load the project's glossary into the system context on demand.

Put this module where Python can import it (beside ship.json works) and list it in ship.json::

    {"tools": {"modules": ["glossary_tool"]}}

or pass ``toolsets=[glossary_tool.toolset]`` to ``ShipAgent.from_project``.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import FunctionToolset

from shipagent import current_tool_context
from shipagent.tools.execution import fingerprint_of

toolset = FunctionToolset()


@toolset.tool_plain
def glossary_load() -> dict[str, Any]:
    """Load the project glossary (GLOSSARY.md). Call it when the user uses a term you do not know."""
    ctx = current_tool_context()  # the run this call belongs to: chat key, project, injection
    path = ctx.project_root / "GLOSSARY.md"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        # Failures are data the model can read, never exceptions that end the run.
        return {"success": False, "error": "this project has no GLOSSARY.md"}
    # A system message: rules and facts go at the top of every later request of this run.
    # The fingerprint makes a second call in the same run a no-op instead of a second copy.
    result = ctx.inject_system_message_once(
        f"Project glossary:\n{text}", fingerprint=f"glossary:{fingerprint_of(text)}"
    )
    return {"success": True, "inserted": int(result.inserted), "reason": result.reason}
