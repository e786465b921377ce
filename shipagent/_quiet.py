"""pydantic-ai's first-run banner stays off in every process that uses shipagent.

pydantic-ai prints a banner (logo, observability advice) to stderr of an interactive process on its
first agent run; in ``shipagent chat`` it lands between the user's prompt and the answer, and in a
server's log. shipagent has its own status output, so importing shipagent turns it off through
pydantic-ai's public switch. ``shipagent/__init__`` imports this module first.
"""

from __future__ import annotations

import pydantic_ai

__all__: list[str] = []

pydantic_ai.BANNER_ENABLED = False
