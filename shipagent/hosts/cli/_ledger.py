"""``shipagent inspect CHAT_KEY``: what the model saw, request by request (read-only).

Reads ``.ship/chats/<key>/requests.jsonl`` (and its previous generation) and the chat's pins
(``pins.json``) without building the agent, starting anything or writing a byte. Mistakes print
one ``error:`` line and exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from ...agent.ledger._inspect import diff_records, find_record, ledger_stats, previous_of
from ...agent.ledger._records import SECTION_NAMES, LedgerItem, RequestRecord
from ...agent.ledger._store import LedgerStore
from ...chatkeys import ShipPaths, validate_chat_key
from ...config import PinsConfig, load_config
from ...errors import ShipAgentError
from ...store.pins import PinStore, pins_tokens
from ._opts import ProjectOpt, fail, out

__all__ = ["inspect_command"]


def _note(item: LedgerItem) -> str:
    if item.edit == "cut":
        return f"cut to {item.cap} tokens/part (was {item.original_tokens})"
    if item.edit == "elided":
        return "; ".join(item.hints.values())
    if item.edit == "dropped":
        return f"left out ({item.original_tokens} tokens)"
    return ""


def _items_table(record: RequestRecord) -> Table:
    table = Table(title="items, in the order sent", title_justify="left")
    for column in ("#", "source", "section", "edit", "tokens", "tool call", "note"):
        table.add_column(column, justify="right" if column in ("#", "tokens") else "left")
    for n, item in enumerate(record.items, 1):
        style = {"cut": "yellow", "elided": "cyan", "dropped": "dim"}.get(item.edit, "")
        table.add_row(
            str(n),
            escape(item.source),
            item.section,
            f"[{style}]{item.edit}[/]" if style else item.edit,
            str(item.tokens),
            escape(", ".join(item.tool_call_ids)),
            escape(_note(item)),
        )
    return table


def _show(record: RequestRecord) -> None:
    usage = ""
    if record.input_tokens is not None:
        usage = f" · provider input {record.input_tokens} (cached {record.cached_tokens or 0})"
    out.print(
        f"[bold]request {record.request_id} step {record.step}[/] · {record.ts} · {escape(record.model)}\n"
        f"prefix {record.prefix_hash} · message budget {record.budget.get('total')} · "
        f"estimate {record.estimate}{usage}\n{_bust_line(record)}"
    )
    sections = Table(title="sections", title_justify="left")
    sections.add_column("section")
    sections.add_column("tokens", justify="right")
    for name in SECTION_NAMES:
        sections.add_row(name, str(record.sections.get(name, 0)))
    sections.add_row("[bold]total[/]", f"[bold]{record.total_tokens}[/]")
    out.print(sections)
    out.print(_items_table(record))


def _show_pins(root: Path, chat_key: str) -> None:
    """The chat's pinned facts, which every request's instructions end with."""
    try:
        config = load_config(root).context.pins
    except ShipAgentError:  # a broken ship.json does not hide the ledger: the defaults' budget
        config = PinsConfig()
    try:
        pins = PinStore(ShipPaths(root), config).load_sync(chat_key)
    except ShipAgentError as exc:
        out.print(f"[red]pins: {escape(str(exc))}[/]")
        return
    if not pins:
        out.print("[dim]no pinned facts[/]")
        return
    table = Table(
        title=f"pinned facts: {len(pins)}, {pins_tokens(pins)} of {config.max_tokens} tokens",
        title_justify="left",
    )
    for column in ("id", "text", "by", "created"):
        table.add_column(column)
    for pin in pins:
        table.add_row(pin.id, escape(pin.text), pin.by, pin.created)
    out.print(table)


def _bust_line(record: RequestRecord) -> str:
    """What the request did to the chat's cacheable prefix (its ``bust``)."""
    if record.bust:
        section, reason = record.bust.get("section", "?"), record.bust.get("reason", "?")
        return f"[yellow]cache bust: {escape(section)} ({escape(reason)})[/]"
    if not record.tools_hash:  # written before the ledger compared requests
        return "cache bust: not recorded"
    return "cache bust: none (appended to the chat's previous request)"


def _show_diff(records: list[RequestRecord], record: RequestRecord, as_json: bool) -> None:
    before = previous_of(records, record)
    changes = diff_records(before, record)
    if as_json:
        payload = [
            {
                "change": c.change,
                "source": c.source,
                "before": c.before.to_json() if c.before else None,
                "after": c.after.to_json() if c.after else None,
            }
            for c in changes
        ]
        print(
            json.dumps(
                {
                    "request": record.id,
                    "previous": before.id if before else None,
                    "bust": record.bust,
                    "changes": payload,
                }
            )
        )
        return
    title = f"changes from {before.id if before else '(nothing)'} to {record.id}"
    table = Table(title=title, title_justify="left")
    for column in ("change", "source", "before", "after"):
        table.add_column(column)
    for c in changes:
        was = f"{c.before.edit} {c.before.tokens}" if c.before else ""
        now = f"{c.after.edit} {c.after.tokens}" if c.after else ""
        table.add_row(c.change, escape(c.source), was, now)
    out.print(table)
    if before is not None and before.prefix_hash != record.prefix_hash:
        out.print("[yellow]the instructions/tools prefix changed[/]")
    out.print(_bust_line(record))


def _show_stats(stats: dict[str, Any]) -> None:
    table = Table(title="ledger stats", title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    for key in (
        "requests",
        "turns",
        "distinctPrefixes",
        "prefixStableShare",
        "inputTokens",
        "cachedTokens",
        "cachedTokenShare",
    ):
        value = stats[key]
        table.add_row(key, "n/a" if value is None else f"{value:.1%}" if "Share" in key else f"{value:,}")
    busts = stats["busts"]
    table.add_row("busts", str(busts["total"]))
    for reason, count in busts["byReason"].items():
        table.add_row(f"busts, reason: {reason}", str(count))
    for section, count in busts["bySection"].items():
        table.add_row(f"busts, section: {section}", str(count))
    for name, mean in stats["meanTokens"].items():
        table.add_row(f"mean tokens: {name}", f"{mean:,.1f}")
    table.add_row("mean tokens: total", f"{stats['meanTotalTokens']:,.1f}")
    for edit, count in sorted(stats["edits"].items()):
        table.add_row(f"items {edit}", str(count))
    out.print(table)


def inspect_command(
    chat_key: Annotated[str, typer.Argument(help="The chat key (telegram:chat:42).")],
    project: ProjectOpt = Path("."),
    request: Annotated[
        str | None, typer.Option("--request", help="<requestId> or <requestId>:<step>; default: the newest.")
    ] = None,
    diff: Annotated[bool, typer.Option("--diff", help="What changed from the previous request.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    stats: Annotated[
        bool,
        typer.Option(
            "--stats",
            help="Per-chat statistics over every kept request: tokens, cache busts, provider-cached tokens.",
        ),
    ] = False,
) -> None:
    """Show what the model saw: sections and items of a request, with source, edit and tokens."""
    try:
        validate_chat_key(chat_key)
    except ShipAgentError as exc:
        raise fail(str(exc)) from None
    if not project.is_dir():
        raise fail(f"project directory {str(project)!r} does not exist")
    records, unreadable = LedgerStore(ShipPaths(project.resolve())).scan(chat_key)
    if stats:
        summary = ledger_stats(records)
        if as_json:
            print(json.dumps(summary))
        else:
            _show_stats(summary)
        return
    try:
        record = find_record(records, request, unreadable)
    except KeyError as exc:
        raise fail(str(exc.args[0])) from None
    if diff:
        _show_diff(records, record, as_json)
    elif as_json:
        print(json.dumps(record.to_json(), ensure_ascii=False))
    else:
        _show(record)
        _show_pins(project.resolve(), chat_key)
