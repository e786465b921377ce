"""The context window: what one model request carries, decided before every request.

Pure functions of the messages and the budgets, no I/O, and none is re-exported (import from the
module itself): :mod:`.placement` (the capability that lays out each request and reports it),
:mod:`.sections` (the items of a request and the edit each got), :mod:`.budget` (token budgets per
section), :mod:`.compaction` (folding old messages into a summary, never splitting a tool call
from its result), :mod:`.injections` (messages tools injected, carried as data),
:mod:`.summarizer` (model-written summaries) and :mod:`.tokens` (token counting).

A chat's history itself — kept in memory between turns and in logs under ``.ship/`` — belongs to
the store: :mod:`shipagent.store.chats`, :mod:`shipagent.store.logs`,
:mod:`shipagent.store.agent_context`, :mod:`shipagent.store.reconcile`.

The words are defined once, in the documentation's "Words and layers" page (``docs/concepts/glossary.md``).
"""
