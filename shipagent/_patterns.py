"""Regular expressions a model or a user supplies, compiled for RE2: linear time, never Python's ``re``.

Why not ``re``: it backtracks, so ``(a+)+$`` over 26 ``a`` and a ``!`` takes seconds, each extra
character doubling the time, and it holds the GIL while it does — every other chat, ``/healthz``
included, waits. RE2 (``google-re2``) matches in time linear in the text for any pattern, bounds
the memory a compiled pattern may use, and releases the GIL while it matches. The price is the
constructs that need backtracking: backreferences, lookahead and lookbehind, atomic groups,
possessive quantifiers, conditionals. A pattern using one is refused with an error that names the
construct and suggests searching for a literal piece of the text instead — never silently run
as something else.

Text is matched as UTF-8 bytes (``surrogatepass``): a transcript line holding a lone surrogate
must not crash a search, it just cannot be matched by ``.``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_PATTERN_CHARS",
    "CompiledPattern",
    "InvalidPatternError",
    "UnsupportedPatternError",
    "compile_pattern",
    "unsupported_construct",
]

MAX_PATTERN_CHARS = 1000
"""The longest pattern accepted: longer ones are not searches, and compiling them costs memory."""

_MAX_MEM = 8 << 20
"""RE2's memory bound for one compiled pattern (program and DFA cache); past it RE2 refuses to compile."""


class InvalidPatternError(ValueError):
    """The pattern is not a regular expression RE2 can run (bad syntax, too long, too big)."""


class UnsupportedPatternError(InvalidPatternError):
    """The pattern uses a construct RE2 does not have (it would need backtracking).

    Attributes:
        construct: what it uses, as shown to the model (``a lookbehind (?<=…)``).
    """

    def __init__(self, message: str, *, construct: str) -> None:
        super().__init__(message)
        self.construct = construct


# Group openings RE2 lacks, longest first so ``(?<=`` is not taken for a named group ``(?<name>``.
_GROUPS = (
    ("<=", "a lookbehind (?<=…)"),
    ("<!", "a negative lookbehind (?<!…)"),
    ("P=", "a named backreference (?P=name)"),
    ("=", "a lookahead (?=…)"),
    ("!", "a negative lookahead (?!…)"),
    (">", "an atomic group (?>…)"),
    ("(", "a conditional group (?(…)…)"),
    ("#", "a comment group (?#…)"),
)


def unsupported_construct(pattern: str, *, possessive: bool = True) -> str | None:
    """The first construct in ``pattern`` that RE2 lacks but backtracking engines have, or ``None``.

    A lexical scan (escapes and character classes skipped), not a parser: it is only asked after
    RE2 has refused the pattern, to tell "you used a lookahead" from "this is not a regex at all".

    Args:
        pattern: the pattern as written.
        possessive: also report possessive quantifiers (``a++``); off where ``C++`` is more likely
            a literal someone typed than a quantifier.
    """
    i, size, in_class = 0, len(pattern), False
    while i < size:
        char = pattern[i]
        if char == "\\":
            following = pattern[i + 1 : i + 2]
            if not in_class:
                if following.isdigit() and following != "0":
                    return f"a backreference (\\{following})"
                if following == "g" and pattern[i + 2 : i + 3] == "<":
                    return "a backreference (\\g<…>)"
                if following == "k" and pattern[i + 2 : i + 3] in ("<", "{", "'"):
                    return "a named backreference (\\k<name>)"
                if following == "Z":
                    return "\\Z (write the end of the text as \\z, or $ for the end of a line)"
            i += 2
            continue
        if in_class:
            in_class = char != "]"
            i += 1
            continue
        if char == "[":
            in_class = True
            i += 1
            if pattern[i : i + 1] == "^":
                i += 1
            if pattern[i : i + 1] == "]":  # a leading ] is a literal member, not the end
                i += 1
            continue
        if char == "(" and pattern[i + 1 : i + 2] == "?":
            rest = pattern[i + 2 :]
            for prefix, name in _GROUPS:
                if rest.startswith(prefix):
                    return name
        if possessive and char in "*+?}" and pattern[i + 1 : i + 2] == "+" and i > 0:
            return f"a possessive quantifier ({char}+)"
        i += 1
    return None


@dataclass(frozen=True, slots=True)
class CompiledPattern:
    """A pattern RE2 accepted. Matching releases the GIL and takes time linear in the text.

    Attributes:
        source: the pattern as the caller wrote it.
        case_sensitive: whether case must match (otherwise Unicode simple case folding).
        multiline: whether ``^``/``$`` match at every line's start and end (else the text's).
    """

    source: str
    case_sensitive: bool
    multiline: bool
    _regex: Any

    def search_text(self, text: str) -> bool:
        """Whether the pattern occurs anywhere in ``text``."""
        return self._regex.search(text.encode("utf-8", "surrogatepass")) is not None

    def find(self, data: bytes, pos: int = 0) -> int | None:
        """The byte offset of the first match in ``data`` at or after ``pos``, or ``None``."""
        hit = self._regex.search(data, pos)
        return None if hit is None else int(hit.start())

    def search_bytes(self, data: bytes) -> bool:
        """Whether the pattern occurs anywhere in ``data`` (UTF-8; invalid bytes match nothing)."""
        return self._regex.search(data) is not None


def compile_pattern(
    pattern: str, *, case_sensitive: bool = True, multiline: bool = False, possessive: bool = True
) -> CompiledPattern:
    """Compile ``pattern`` with RE2, or say precisely why it cannot run.

    Args:
        pattern: RE2 syntax (https://github.com/google/re2/wiki/Syntax): Perl/Python-style classes,
            groups, alternation, counted repetition up to 1000, ``(?i)``-style flags.
        case_sensitive: ``False`` folds case (Unicode-aware).
        multiline: ``^`` and ``$`` match at line starts and ends (used to skip whole blocks).
        possessive: name possessive quantifiers as unsupported (see :func:`unsupported_construct`).

    Raises:
        UnsupportedPatternError: a backreference, lookaround, atomic group, possessive quantifier,
            conditional or ``\\Z``: the message names it and suggests a literal.
        InvalidPatternError: not valid syntax, longer than :data:`MAX_PATTERN_CHARS`, or bigger
            compiled than RE2's memory bound.
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidPatternError(
            f"the pattern is {len(pattern)} characters long; at most {MAX_PATTERN_CHARS} are accepted"
        )
    import re2  # type: ignore[import-untyped]  # ~20 ms of start-up: only paid by a search

    options = re2.Options()
    options.case_sensitive = case_sensitive
    options.max_mem = _MAX_MEM
    options.log_errors = False  # RE2 would print every rejected pattern to stderr
    source = f"(?m){pattern}" if multiline else pattern
    try:
        regex = re2.compile(source.encode("utf-8", "surrogatepass"), options)
    except re2.error as exc:
        construct = unsupported_construct(pattern, possessive=possessive)
        if construct is not None:
            raise UnsupportedPatternError(
                f"the pattern {pattern!r} uses {construct}, which the regex engine here (RE2, chosen "
                "because its matching time is linear) does not support; search for a literal piece "
                "of the text instead, or rewrite the pattern without it",
                construct=construct,
            ) from None
        raw = exc.args[0] if exc.args else ""
        detail = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        raise InvalidPatternError(f"invalid regular expression {pattern!r}: {detail}") from None
    return CompiledPattern(pattern, case_sensitive, multiline, regex)
