"""SessionTokenStore: secrets a provider tool's backend can check, revocable per agent."""

from __future__ import annotations

import re

from shipagent.tools.context import SessionTokenStore


def test_tokens_are_64_lowercase_hex_unique_and_validate_to_their_owner() -> None:
    store = SessionTokenStore()
    tokens = {store.generate("bot", f"chat-{i}") for i in range(50)}
    assert len(tokens) == 50
    assert all(re.fullmatch(r"[0-9a-f]{64}", t) for t in tokens)

    token = store.generate("bot", "chat-x")
    record = store.validate(token)
    assert record is not None
    assert (record.token, record.agent_name, record.session_id) == (token, "bot", "chat-x")
    assert record.created_at.tzinfo is not None


def test_validate_rejects_unknown_malformed_and_non_string_tokens() -> None:
    store = SessionTokenStore()
    token = store.generate("bot")
    assert store.validate("0" * 64) is None
    assert store.validate(token.upper()) is None
    assert store.validate(token[:-1]) is None
    assert store.validate("") is None
    assert store.validate(None) is None


def test_regenerating_for_the_same_session_revokes_the_previous_token() -> None:
    store = SessionTokenStore()
    old = store.generate("bot", "chat-1")
    new = store.generate("bot", "chat-1")
    assert store.validate(old) is None
    assert store.validate(new) is not None
    assert len(store) == 1
    # tokens without a session id are independent
    a, b = store.generate("bot"), store.generate("bot")
    assert store.validate(a) is not None and store.validate(b) is not None


def test_revoke_removes_all_tokens_of_one_agent_and_reports_how_many() -> None:
    store = SessionTokenStore()
    mine = [store.generate("bot", "c1"), store.generate("bot", "c2"), store.generate("bot")]
    theirs = store.generate("other", "c1")
    assert store.revoke("bot") == 3
    assert all(store.validate(t) is None for t in mine)
    assert store.validate(theirs) is not None
    assert store.revoke("bot") == 0
    # after revocation the same session can be issued a token again
    assert store.validate(store.generate("bot", "c1")) is not None
