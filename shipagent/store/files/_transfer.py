"""The export format of one chat's context files, and the checks an import must pass.

An export is plain JSON::

    {"conversationId": "...", "exportedAt": <ms since epoch>, "version": 1,
     "items": [ContextRef, ...], "files": {"<path relative to the chat's folder>": "<text>"}}

It is decoupled from any other export: nothing else writes or reads it. A file that is not valid
UTF-8 (a command's raw output adopted as an artifact) travels base64-encoded and is listed in an
extra ``"binaryFiles": [path, ...]``, so an import still reproduces every byte. An import is planned in
full — every item parsed, every path checked — before a single byte is written, so a malicious
export is refused whole and leaves the disk as it was.
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...errors import BadRequestError, NotFoundError
from ._ref import ContextRef

__all__ = ["EXPORT_VERSION", "export_refs", "plan_import"]

log = logging.getLogger("shipagent.tools.files")

EXPORT_VERSION = 1


def export_refs(
    chat_key: str, refs: Sequence[ContextRef], path_of: Callable[[ContextRef], Path]
) -> dict[str, Any]:
    """Build the export of ``refs`` (eager ones), reading each file's text through ``path_of``."""
    items: list[dict[str, Any]] = []
    files: dict[str, str] = {}
    binary: list[str] = []
    for ref in refs:
        try:
            data = path_of(ref).read_bytes()
        except (NotFoundError, BadRequestError, OSError) as exc:
            log.warning("export of %r: skipping context file %r (%s)", chat_key, ref.id, exc)
            continue
        try:
            files[ref.path] = data.decode("utf-8")
        except UnicodeDecodeError:
            files[ref.path] = base64.b64encode(data).decode("ascii")
            binary.append(ref.path)
        items.append(ref.to_json() | {"sizeBytes": len(data)})
    return {
        "conversationId": chat_key,
        "exportedAt": int(time.time() * 1000),
        "version": EXPORT_VERSION,
        "items": items,
        "files": files,
    } | ({"binaryFiles": binary} if binary else {})


def plan_import(data: Any, checked_path: Callable[[str, str], Path]) -> list[tuple[ContextRef, Path, bytes]]:
    """Validate an export; return ``(ref, target file, bytes)`` for every eager item.

    Args:
        data: the parsed export.
        checked_path: maps a relative path (and a description of where it came from, for the
            error) to a target inside the chat's folder, raising :class:`BadRequestError` otherwise.

    Raises:
        BadRequestError: the first problem found, naming the item or file.
    """
    if not isinstance(data, dict):
        raise BadRequestError(f"context export must be a JSON object, got {type(data).__name__}")
    if data.get("version") != EXPORT_VERSION:
        raise BadRequestError(
            f"context export 'version' is {data.get('version')!r}; this shipagent reads version {EXPORT_VERSION}"
        )
    items = data.get("items")
    files = data.get("files")
    if not isinstance(items, list):
        raise BadRequestError("context export 'items' must be a list of context refs")
    if not isinstance(files, dict):
        raise BadRequestError("context export 'files' must be an object of path -> text")
    binary = data.get("binaryFiles", [])
    if not isinstance(binary, list) or not all(isinstance(b, str) for b in binary):
        raise BadRequestError("context export 'binaryFiles' must be a list of paths")
    # Every path is checked, including ones no item refers to: a hostile export is refused whole.
    payloads: dict[str, bytes] = {}
    for rel, text in files.items():
        checked_path(rel, f"files[{rel!r}]")
        if not isinstance(text, str):
            raise BadRequestError(f"context export files[{rel!r}] must be text, got {type(text).__name__}")
        try:
            payloads[rel] = base64.b64decode(text, validate=True) if rel in binary else text.encode("utf-8")
        except (UnicodeEncodeError, binascii.Error) as exc:
            raise BadRequestError(f"context export files[{rel!r}]: cannot be decoded ({exc})") from None
    plan: list[tuple[ContextRef, Path, bytes]] = []
    seen: set[str] = set()
    for position, raw in enumerate(items):
        where = f"context export items[{position}]"
        ref = ContextRef.from_json(raw, where=where)
        if ref.id in seen:
            raise BadRequestError(f"{where}: duplicate id {ref.id!r}")
        seen.add(ref.id)
        target = checked_path(ref.path, f"{where} ({ref.id})")
        if not ref.eager:
            continue  # lazy refs are rebuilt on demand, never imported
        if ref.path not in files:
            raise BadRequestError(f"{where} ({ref.id}): 'files' has no entry for path {ref.path!r}")
        plan.append((ref, target, payloads[ref.path]))
    return plan
