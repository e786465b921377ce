"""``HandoverPacker.pack_context``: assemble the context box a delegated agent run receives.

A sub-agent sees only its context box. Nothing of the delegating agent's history reaches it unless
the handover rules put it there explicitly — by packing a tool argument as a card, by inheriting a
box named in the arguments, or by adding the parent pointer. The rules run in their documented order
and raise their documented errors; all new cards and the box are then written in one transaction, so a
request that fails any rule leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ...errors import BadRequestError
from ...store.cards._cards import (
    CARD_PARENT_POINTER,
    CARD_TASK_INSTRUCTION,
    CARD_TASK_RESULT_FIELDS,
    CardContent,
    FieldsSchemaContent,
    JsonContent,
    NewCard,
    TextContent,
)
from ...store.cards._store import BoxId, CardBoxStore
from ._resources import ResourceStore

__all__ = ["HandoverPacker", "PackedContext", "instruction_handover", "pack_context_with_instruction"]


class PackedContext(NamedTuple):
    """What :meth:`HandoverPacker.pack_context` returns (unpacks as a ``(context_box_id, target_profile_box_id, attached_card_ids)`` triple)."""

    context_box_id: str
    target_profile_box_id: str
    attached_card_ids: list[str]


def _section(container: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = container.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BadRequestError(f"{where}{key} must be an object, got {type(value).__name__}")
    return value


def _box_ids(arg_key: str, value: object) -> list[BoxId]:
    """Rule 3's argument shapes: one box id (str/int) or a list of them."""

    def one(item: object) -> BoxId:
        if isinstance(item, bool) or not isinstance(item, str | int) or item == "":
            raise BadRequestError(
                f"argument {arg_key!r} must be a box id (string or integer) or a list of them, got {item!r}"
            )
        return item

    if isinstance(value, list | tuple):
        return [one(v) for v in value]
    return [one(value)]


def _argument_content(arg_key: str, card_type: str, value: object) -> CardContent:
    """Rule 2's content choice: fields schema, JSON for dict/list, text for everything else."""
    if card_type == CARD_TASK_RESULT_FIELDS:
        if not isinstance(value, list):
            raise BadRequestError(
                f"argument {arg_key!r} packed as {CARD_TASK_RESULT_FIELDS} must be a list, "
                f"got {type(value).__name__}"
            )
        return FieldsSchemaContent(list(value))
    if isinstance(value, dict | list):
        return JsonContent(value)
    return TextContent(str(value))


def instruction_handover(*, inherit: bool, result_fields: bool = False) -> dict[str, Any]:
    """The fixed handover recipe of ``delegate_async`` / ``fork_join``."""
    pack: list[dict[str, Any]] = [{"arg_key": "instruction", "as_card_type": CARD_TASK_INSTRUCTION}]
    if result_fields:
        pack.append({"arg_key": "result_fields", "as_card_type": CARD_TASK_RESULT_FIELDS})
    inherit_context: dict[str, Any] = {"include_parent": True}
    if inherit:
        inherit_context["include_boxes_from_args"] = ["input_box_ids"]
    return {"context_packing_config": {"pack_arguments": pack, "inherit_context": inherit_context}}


async def pack_context_with_instruction(
    packer: HandoverPacker,
    *,
    project_id: str | None,
    tool_suffix: str,
    source_agent_id: str,
    profile_name: str,
    instruction: object,
    input_box_ids: Sequence[BoxId] | BoxId | None = None,
    result_fields: list[Any] | None = None,
) -> PackedContext:
    """Pack the one recipe every delegation uses: instruction, inherited boxes, parent pointer.

    The context box holds, in order: the ``instruction`` as a ``task.instruction`` card (role
    ``user``), the ``result_fields`` as a ``task.result_fields`` card when given, the cards of
    ``input_box_ids`` when given, and the ``meta.parent_pointer`` card.

    Raises:
        BadRequestError, NotFoundError: as :meth:`HandoverPacker.pack_context`.
    """
    arguments: dict[str, Any] = {"profile_name": profile_name, "instruction": instruction}
    has_inputs = input_box_ids is not None and input_box_ids != []
    if has_inputs:
        arguments["input_box_ids"] = (
            list(input_box_ids) if isinstance(input_box_ids, list | tuple) else input_box_ids
        )
    if result_fields is not None:
        arguments["result_fields"] = result_fields
    handover = instruction_handover(inherit=has_inputs, result_fields=result_fields is not None)
    return await packer.pack_context(project_id, tool_suffix, source_agent_id, arguments, handover)


class HandoverPacker:
    """Builds context boxes from tool arguments and a handover configuration.

    Args:
        store: where the new cards and the context box are written.
        resource_store: resolves the target profile name to its profile box.
    """

    def __init__(self, store: CardBoxStore, resource_store: ResourceStore) -> None:
        self.store = store
        self.resource_store = resource_store

    async def pack_context(
        self,
        project_id: str | None,
        tool_suffix: str,
        source_agent_id: str,
        arguments: Mapping[str, Any],
        handover: Mapping[str, Any],
    ) -> PackedContext:
        """Apply the packing rules, in order, and write the context box.

        1. Target profile: ``arguments["profile_name"]``, else
           ``handover["target_profile_config"]["profile_name"]``, resolved to its profile box.
        2. ``context_packing_config.pack_arguments``: each dict rule whose ``arg_key`` is in
           ``arguments`` packs that value as one card (type ``as_card_type``, default
           ``task.instruction``; metadata ``card_metadata`` with ``role`` defaulting to ``user``;
           author ``tool_suffix``).
        3. ``context_packing_config.inherit_context.include_boxes_from_args``: the cards of the
           boxes named by those arguments, in order, each card once (first occurrence wins).
        4. ``inherit_context.include_parent``: a ``meta.parent_pointer`` card naming
           ``source_agent_id``, role ``system``.
        5. The box is created; the triple is returned.

        Args:
            project_id: the project the cards belong to (``None``: the store's own).
            tool_suffix: the packing tool's name, recorded as the author of the new cards.
            source_agent_id: the delegating agent (its chat key), for the parent pointer.
            arguments: the tool call's arguments.
            handover: the handover configuration (``target_profile_config``,
                ``context_packing_config``).

        Raises:
            BadRequestError: no target profile, a malformed rule or configuration section, a
                ``task.result_fields`` value that is not a list, or a box argument of another type.
            NotFoundError: the profile or an inherited box does not exist.
        """
        if not isinstance(arguments, Mapping):
            raise BadRequestError(f"arguments must be an object, got {type(arguments).__name__}")
        if not isinstance(handover, Mapping):
            raise BadRequestError(f"handover must be an object, got {type(handover).__name__}")

        # 1. target profile
        profile_name = arguments.get("profile_name") or _section(
            handover, "target_profile_config", "handover."
        ).get("profile_name")
        if not profile_name:
            raise BadRequestError(
                "no target profile: pass arguments.profile_name or set "
                "handover.target_profile_config.profile_name"
            )
        if not isinstance(profile_name, str):
            raise BadRequestError(f"profile_name must be a string, got {type(profile_name).__name__}")
        profile_box_id = await self.resource_store.find_profile_by_name(profile_name)

        packing = _section(handover, "context_packing_config", "handover.")
        entries: list[str | NewCard] = []

        # 2. pack_arguments
        rules = packing.get("pack_arguments") or []
        if not isinstance(rules, list):
            raise BadRequestError("handover.context_packing_config.pack_arguments must be a list")
        for rule in rules:
            if not isinstance(rule, dict):
                continue  # only dict rules are processed
            arg_key = rule.get("arg_key")
            if not isinstance(arg_key, str) or arg_key not in arguments:
                continue
            card_type = rule.get("as_card_type") or CARD_TASK_INSTRUCTION
            raw_metadata = rule.get("card_metadata") or {}
            if not isinstance(card_type, str) or not isinstance(raw_metadata, dict):
                raise BadRequestError(
                    f"pack_arguments rule for {arg_key!r}: as_card_type must be a string and "
                    "card_metadata an object"
                )
            metadata = dict(raw_metadata)
            metadata.setdefault("role", "user")
            content = _argument_content(arg_key, card_type, arguments[arg_key])
            entries.append(NewCard(type=card_type, content=content, author_id=tool_suffix, metadata=metadata))

        # 3. inherit boxes named by arguments
        inherit = _section(packing, "inherit_context", "handover.context_packing_config.")
        box_args = inherit.get("include_boxes_from_args") or []
        if not isinstance(box_args, list) or not all(isinstance(a, str) for a in box_args):
            raise BadRequestError("inherit_context.include_boxes_from_args must be a list of argument names")
        seen: set[str] = set()
        for arg_key in box_args:
            value = arguments.get(arg_key)
            if value is None:
                continue
            for box_id in _box_ids(arg_key, value):
                box = await self.store.get_box(box_id)
                for card_id in box.card_ids:
                    if card_id not in seen:
                        seen.add(card_id)
                        entries.append(card_id)

        # 4. parent pointer
        if inherit.get("include_parent"):
            entries.append(
                NewCard(
                    type=CARD_PARENT_POINTER,
                    content=JsonContent({"parent_agent_id": source_agent_id}),
                    author_id=tool_suffix,
                    metadata={"role": "system"},
                )
            )

        # 5. the box
        if not profile_box_id:
            raise BadRequestError(f"profile {profile_name!r} did not resolve to a profile box")
        box_id, card_ids = await self.store.create_box_with(entries, project_id)
        return PackedContext(box_id, profile_box_id, card_ids)

    pack_context_with_instruction = pack_context_with_instruction
    """See :func:`pack_context_with_instruction` (the packer is its first argument)."""
