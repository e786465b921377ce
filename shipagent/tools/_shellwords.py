"""What an allow-listed shell command could do besides reading the project: the allow list's guard.

An ``allow`` glob such as ``cat *`` matches ``cat /dev/null > ~/.bashrc`` just as well as
``cat README.md``. A glob cannot see the shell's grammar, so before an allow match approves a
command, :func:`allow_blocker` reads the command the way bash will and names the first thing an
allow glob must not vouch for:

- **writes through the shell**: output redirections to files (``>``, ``>>``, ``>|``, ``&>``,
  ``&>>``, ``<>``, ``>&FILE``, ``2>FILE``), here-documents and here-strings (they feed text to a
  program, which may be an interpreter), and ``tee``. Redirections to ``/dev/null`` and fd
  duplications (``2>&1``, ``>&-``) write nothing and stay allowed.
- **writing options of reading tools**: ``--output`` and its kin (``git log --output=FILE``,
  abbreviations such as ``--outp`` included, since git and getopt accept them), ``sort -o``,
  ``sed -i``, ``find -exec/-delete/-fprint``, ``dd of=``, ``uniq IN OUT``.
- **paths outside the project** (with ``project_root``): absolute paths, ``..`` escapes, symlinks
  and glob matches that resolve outside, and arguments bash expands at run time (``$HOME``, ``~``,
  ``{a,b}``) whose target cannot be known in advance. Reading ``/etc/shadow`` needs approval.

Substitutions (``$(...)``, backticks, ``<(...)``, ``>(...)``) are refused by the caller before this
runs. Anything that cannot be parsed (an unbalanced quote) is a blocker too: when in doubt, the
command goes to the mode (``ask``/``deny``), never silently through. This is a policy aid, not a
security boundary: the bubblewrap sandbox (``_sandbox``) is what the kernel enforces.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["allow_blocker"]

_REDIRECTIONS = ("&>>", "&>", ">>", ">|", ">&", "<<<", "<<-", "<<", "<>", "<&", ">", "<")
_CONTROLS = ("||", "&&", ";;&", ";;", ";&", "|&", "|", "&", ";", "(", ")", "\n")
_OPERATORS = sorted(_REDIRECTIONS + _CONTROLS, key=len, reverse=True)
_WRITES = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_HEREDOCS = frozenset({"<<", "<<-", "<<<"})
_IO_NAME = re.compile(r"\d+|\{[A-Za-z_][A-Za-z0-9_]*\}")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_WRITING_LONG_OPTIONS = (
    "output",
    "output-file",
    "output-document",
    "output-directory",
    "out-file",
    "outfile",
    "in-place",
    "log-file",
    "logfile",
)
_FIND_ACTIONS = frozenset(
    {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
)
_MAX_GLOB_MATCHES = 2000


@dataclass(slots=True)
class _Word:
    text: str = ""
    dynamic: bool = False  # bash expands it at run time: $VAR, ~, {a,b}
    glob: bool = False  # unquoted * ? [
    quoted: bool = False


@dataclass(frozen=True, slots=True)
class _Op:
    text: str
    fd: str = ""


@dataclass(slots=True)
class _Simple:
    words: list[_Word] = field(default_factory=list)
    redirects: list[tuple[_Op, _Word | None]] = field(default_factory=list)


def _double_quoted(s: str, i: int, word: _Word) -> int:
    """Consume ``"..."`` starting after the opening quote; return the index after the closing one."""
    n = len(s)
    while i < n:
        c = s[i]
        if c == '"':
            return i + 1
        if c == "\\" and i + 1 < n and s[i + 1] in '$`"\\\n':
            word.text += s[i + 1]
            i += 2
            continue
        if c in "$`":
            word.dynamic = True
        word.text += c
        i += 1
    raise ValueError("an unbalanced double quote")


def _lex(s: str) -> list[_Word | _Op]:
    """Split ``s`` into words and operators the way bash does (quotes, escapes, io numbers)."""
    tokens: list[_Word | _Op] = []
    word: _Word | None = None
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in " \t":
            if word is not None:
                tokens.append(word)
                word = None
            i += 1
            continue
        if c == "#" and word is None:  # a comment runs to the end of the line
            end = s.find("\n", i)
            i = n if end < 0 else end
            continue
        op = next((o for o in _OPERATORS if s.startswith(o, i)), None)
        if op is not None:
            fd = ""
            if word is not None:
                if op in _REDIRECTIONS and not word.quoted and _IO_NAME.fullmatch(word.text):
                    fd = word.text  # ``2>`` / ``{fd}>``: the word is the redirection's fd
                else:
                    tokens.append(word)
                word = None
            tokens.append(_Op(op, fd))
            i += len(op)
            continue
        if word is None:
            word = _Word()
            if c == "~":
                word.dynamic = True  # tilde expansion: the home directory of someone
        if c == "\\":
            if i + 1 < n and s[i + 1] == "\n":
                i += 2  # a line continuation
                continue
            word.text += s[i + 1 : i + 2]
            word.quoted = True
            i += 2
        elif c == "'":
            end = s.find("'", i + 1)
            if end < 0:
                raise ValueError("an unbalanced single quote")
            word.text += s[i + 1 : end]
            word.quoted = True
            i = end + 1
        elif c == '"':
            word.quoted = True
            i = _double_quoted(s, i + 1, word)
        else:
            if c in "$`{" or (c == "~" and word.text[-1:] in ("=", ":")):
                word.dynamic = True
            elif c in "*?[":
                word.glob = True
            word.text += c
            i += 1
    if word is not None:
        tokens.append(word)
    return tokens


def _simple_commands(tokens: list[_Word | _Op]) -> list[_Simple]:
    commands = [_Simple()]
    pending: _Op | None = None
    for token in tokens:
        if isinstance(token, _Op):
            if pending is not None:  # ``> |``: a redirection without a target
                commands[-1].redirects.append((pending, None))
                pending = None
            if token.text in _REDIRECTIONS:
                pending = token
            else:
                commands.append(_Simple())
        elif pending is not None:
            commands[-1].redirects.append((pending, token))
            pending = None
        else:
            commands[-1].words.append(token)
    if pending is not None:
        commands[-1].redirects.append((pending, None))
    return [c for c in commands if c.words or c.redirects]


def _redirect_blocker(op: _Op, target: _Word | None) -> str | None:
    shown = f"{op.fd}{op.text} {target.text if target else ''}".strip()
    if op.text in _HEREDOCS:
        return f"it feeds a here-document or here-string to a program ('{shown}')"
    if target is None:
        return f"it holds a redirection without a target ('{shown}')"
    harmless = target.text == "/dev/null" and not target.dynamic and not target.glob
    if op.text in _WRITES and not harmless:
        return f"it writes to a file through the redirection '{shown}'"
    if op.text in (">&", "<&") and not (re.fullmatch(r"\d+-?|-", target.text) or harmless):
        return f"it writes to a file through the redirection '{shown}'"
    return None


def _long_option_writes(word: str) -> bool:
    name = word[2:].split("=", 1)[0]
    return len(name) >= 2 and any(option.startswith(name) for option in _WRITING_LONG_OPTIONS)


def _option_blocker(words: list[str]) -> str | None:
    """A known writing option among ``words`` (one simple command, wrappers like ``xargs`` included)."""
    for k, word in enumerate(words):
        if word.startswith("--") and _long_option_writes(word):
            return f"the option '{word}' makes it write a file"
        program = os.path.basename(word)
        rest = words[k + 1 :]
        shorts = [w for w in rest if w.startswith("-") and not w.startswith("--")]
        if program == "tee":
            return "it runs 'tee', which writes files"
        if program == "sort" and any("o" in w[1:] for w in shorts):
            return "'sort -o' writes a file"
        if program == "sed" and any("i" in w[1:] for w in shorts):
            return "'sed -i' edits files in place"
        if program == "find" and (found := next((w for w in rest if w in _FIND_ACTIONS), None)):
            return f"'find {found}' runs commands or writes files"
        if program == "dd" and any(w.startswith("of=") for w in rest):
            return "'dd of=' writes a file"
        if program == "uniq" and len([w for w in rest if not w.startswith("-")]) >= 2:
            return "'uniq IN OUT' writes its second operand"
    return None


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _path_blocker(word: _Word, root: str) -> str | None:
    """Why ``word``, taken as a path from the project root, may reach outside it (or None)."""
    text = word.text
    if text.startswith("-"):
        if "=" in text:
            text = text.split("=", 1)[1]  # --file=PATH
        elif not text.startswith("--") and len(text) > 2 and ("/" in text or ".." in text):
            text = text[2:]  # -fPATH
        else:
            return None
    elif _ASSIGNMENT.match(text):
        text = text.split("=", 1)[1]
    if not text or (text == "/dev/null" and not word.glob):
        return None
    if word.dynamic:
        return f"the argument '{word.text}' is expanded by the shell ($, ~ or {{}}), so where it points is unknown"
    joined = text if text.startswith("/") else os.path.join(root, text)
    # The kernel resolves ``..`` after symlinks (``link/../x`` is next to the link's target), so
    # only realpath tells where a path leads; a lexical look decides the wording.
    lexically_inside = _within(os.path.normpath(joined), root)
    if word.glob:
        if any(part.startswith(".") and re.search(r"[*?\[]", part) for part in text.split("/")):
            return f"the pattern '{text}' may match '..' and so reach outside the project"
        matches = glob.glob(joined)
        if len(matches) > _MAX_GLOB_MATCHES:
            return f"the pattern '{text}' matches too many files to check"
        for match in matches or [joined]:
            if not _within(os.path.realpath(match), root):
                shown = os.path.relpath(match, root) if matches else text
                return f"the pattern '{text}' matches '{shown}', which leads outside the project"
        return None
    if not _within(os.path.realpath(joined), root):
        if lexically_inside:
            return f"the path '{text}' leads outside the project through a symlink"
        return f"the path '{text}' is outside the project"
    return None


def allow_blocker(command: str, project_root: Path | str | None = None) -> str | None:
    """Why an allow glob must not approve ``command`` on its own, or ``None`` when it may.

    Args:
        command: the command line, as the model sent it.
        project_root: the project directory; when given, path arguments are resolved against it
            (this touches the file system: symlinks and globs are followed) and any that reach
            outside it block the allow match.

    Returns:
        A reason phrased to follow "the allow patterns do not vouch for it: ", or ``None``.
    """
    try:
        commands = _simple_commands(_lex(command))
    except ValueError as exc:
        return f"it cannot be parsed ({exc})"
    root = os.path.realpath(project_root) if project_root is not None else None
    for simple in commands:
        for op, target in simple.redirects:
            if reason := _redirect_blocker(op, target):
                return reason
        if reason := _option_blocker([w.text for w in simple.words]):
            return reason
        if root is None:
            continue
        arguments = list(simple.words)
        for k, word in enumerate(arguments):  # the program itself is not a path it reads
            if not _ASSIGNMENT.match(word.text) or word.quoted:
                del arguments[k]
                break
        arguments += [target for _, target in simple.redirects if target is not None]
        for word in arguments:
            if reason := _path_blocker(word, root):
                return reason
    return None
