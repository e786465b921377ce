"""``ContextRef``: the index entry of one context file, and its JSON wire form.

A ref is what the model sees in ``context_list`` and what an export carries; the file itself is
addressed only through ``ref.path``, which is checked to stay inside the chat's context folder
every time it is used (an index line or an import could have been tampered with).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from ...errors import BadRequestError

__all__ = ["CONTEXT_KINDS", "ContextKind", "ContextRef", "utc_now_iso"]

ContextKind = Literal["artifact", "history", "catalog"]
"""What a context file holds: spilled tool output, compacted conversation, or the tool catalog."""
CONTEXT_KINDS: tuple[ContextKind, ...] = ("artifact", "history", "catalog")
"""Every :data:`ContextKind`, in the order listings show them."""


def utc_now_iso() -> str:
    """The current UTC time as ``2026-11-22T02:30:00.123Z`` (what ``created_at`` holds)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class ContextRef:
    """One context file of one chat key.

    Attributes:
        id: short and unique within the chat key (``a3f9c1e``); the handle the model passes to the
            ``context_*`` tools.
        kind: ``artifact`` (spilled tool output, exported material), ``history`` (compacted
            conversation) or ``catalog`` (the skills and tools available).
        name: a human-readable title.
        description: one line on what is inside.
        size_bytes: the file's size in bytes (UTF-8).
        created_at: ISO 8601 UTC timestamp of when this version was written.
        mime: the content type (``text/plain``, ``application/json``, ``text/markdown``).
        eager: ``True`` when shipagent holds the file; a lazy ref (``False``) is rebuilt on demand
            and is skipped by export/import.
        source: which tool or process made it (``tool:exec_shell``, ``compaction``, ``catalog``).
        path: the file's path relative to the chat's context folder.
    """

    id: str
    kind: ContextKind
    name: str
    description: str
    size_bytes: int
    created_at: str
    mime: str
    eager: bool
    source: str
    path: str

    def to_json(self) -> dict[str, Any]:
        """The camelCase wire form used in the index, the tools' results and exports."""
        return _RefWire.model_validate(self, from_attributes=True).model_dump(by_alias=True)

    @classmethod
    def from_json(cls, data: Any, *, where: str = "context ref") -> ContextRef:
        """Parse the wire form, raising :class:`BadRequestError` that names ``where`` and the field."""
        try:
            wire = _RefWire.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"]) or "(root)"
            raise BadRequestError(f"{where}: field '{loc}': {first['msg']}") from None
        return cls(**wire.model_dump())


class _RefWire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    kind: ContextKind
    name: str
    description: str = ""
    size_bytes: int = Field(ge=0)
    created_at: str
    mime: str = "text/plain"
    eager: bool = True
    source: str = ""
    path: str = Field(min_length=1)
