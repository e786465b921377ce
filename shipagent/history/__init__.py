"""A chat's history, and the context window built from it before every model request.

Two kinds of module live here, and none is re-exported (import from the module itself):

* the **context window** — pure functions of what one model request carries, no I/O:
  :mod:`.placement` (the capability that lays out each request and reports it),
  :mod:`.sections` (the items of a request and the edit each got), :mod:`.budget` (token budgets
  per section), :mod:`.compaction` (folding old messages into a summary, never splitting a tool
  call from its result), :mod:`.injections` (messages tools injected, carried as data),
  :mod:`.summarizer` (model-written summaries) and :mod:`.tokens` (token counting);
* the **chat history** and its logs under ``.ship/`` — :mod:`.chats` (each chat's in-memory
  history, hydrated once and committed turn by turn), :mod:`.stores` (the transcript and the
  message log), :mod:`.agent_context` (the agent-context log: one summary per run) and
  :mod:`.reconcile` (making the logs agree after a crash).

The words are defined once, in the documentation's "Words and layers" page (``docs/concepts/glossary.md``).
"""
