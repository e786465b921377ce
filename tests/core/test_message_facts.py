"""Per-message token counts are remembered by identity, and never outlive or misname a message."""

from __future__ import annotations

import dataclasses
import gc
import weakref

from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from shipagent.window import sections
from shipagent.window.sections import message_facts, message_tokens


def test_a_message_is_counted_once_and_a_changed_one_again() -> None:
    message = ModelResponse(
        parts=[TextPart("hello " * 50), ToolCallPart("lookup", {"q": "x"}, tool_call_id="c1")]
    )
    first = message_facts(message)
    assert first == (message_tokens(message), ("c1",))
    assert message_facts(message) == first
    # a replaced message (the way shipagent edits) is a new object: counted for itself
    shorter = dataclasses.replace(message, parts=[TextPart("hi")])
    assert message_facts(shorter) == (message_tokens(shorter), ())
    # a parts list that grew or was swapped in place is counted again, not served stale
    message.parts.append(TextPart("more " * 40))
    assert message_facts(message)[0] == message_tokens(message) > first[0]
    message.parts = [TextPart("x")]
    assert message_facts(message) == (message_tokens(message), ())


def test_the_table_keeps_no_message_alive_and_stays_bounded() -> None:
    request = ModelRequest(parts=[UserPromptPart("q"), ToolReturnPart("lookup", "r", tool_call_id="c9")])
    assert message_facts(request)[1] == ("c9",)
    alive = weakref.ref(request)
    del request
    gc.collect()
    assert alive() is None
    for n in range(sections._FACTS_MAX + 50):
        message_facts(ModelRequest(parts=[UserPromptPart(f"m{n}")]))
    assert len(sections._facts) <= sections._FACTS_MAX
