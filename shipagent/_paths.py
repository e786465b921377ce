"""Files the runtime reads from a project must resolve inside that project.

``Agent.md``, a skill's ``SKILL.md``, a context file: their text goes into the model's context.
A symlink among them that leads out of the project (``Agent.md -> /root/secret``, or to another
project's transcript) would put that file in front of the model, and from there in front of
whoever is chatting. So such a file is resolved (every symlink followed) and refused, with an error
naming it, unless the result is still inside the project. A symlink that stays inside is fine,
except into ``.ship/`` (every chat's transcript, memory and context files) from a file that is not
itself there: ``Agent.md -> .ship/chats/<another chat>/history.jsonl`` would show that chat to all.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ShipAgentError

__all__ = ["OutsideProjectError", "resolve_inside"]


class OutsideProjectError(ShipAgentError, PermissionError):
    """A file the runtime would read resolves (through a symlink) outside its project.

    A ``PermissionError``, so code that already turns an unreadable file into a clear failure
    (``except OSError``) reports this one the same way.
    """


def resolve_inside(root: Path, path: Path, what: str, *, inside: str = "the project") -> Path:
    """``path`` with every symlink resolved, when that stays inside ``root``.

    Read the returned path, not ``path``: a link swapped after this check then changes nothing.
    A path that does not exist resolves as far as it can, so a dangling link out is refused too.
    Blocking (a few ``lstat`` calls): async callers use a worker thread.

    Args:
        root: the directory the file must stay in (the project root, or a skill's home).
        path: the file, absolute or relative to ``root``.
        what: how to name the file in the error (``Agent.md``, ``skill 'deploy' SKILL.md``).
        inside: how to name ``root`` in the error.

    Raises:
        OutsideProjectError: the resolved path is outside ``root``.
    """
    base = root.resolve()
    asked = path if path.is_absolute() else root / path
    target = asked.resolve()
    if not target.is_relative_to(base):
        raise OutsideProjectError(
            f"{what} leads outside {inside} through a symlink; refused (only files inside "
            f"{inside} are read: replace the link with a file, or with a link that stays inside)"
        )
    named = Path(os.path.normpath(asked))
    in_stores = named.is_relative_to(base / ".ship") or named.is_relative_to(root / ".ship")
    if target.is_relative_to(base / ".ship") and not in_stores:
        raise OutsideProjectError(
            f"{what} leads into .ship/ (the chats' transcripts, memory and context files) "
            "through a symlink; refused: replace the link with a file"
        )
    return target
