"""The HTTP endpoints (see the endpoint table in docs/guides/serve.md).

Every endpoint that names a chat checks the caller's key against that chat before reading the
body or touching a file; listing returns only the chats the key may see. Reads of ``.ship/`` run
in worker threads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from ...chatkeys import validate_chat_key
from ...errors import NotFoundError
from ...events import ApprovalRequired
from ...results import AgentResult, BudgetRefusal
from ...store.usage import UsageFileError
from ._auth import ApiKey
from ._body import read_json
from ._openai import IGNORED_HEADER, completion, parse_completion_request
from ._stream import SSE_HEADERS, EventStream, native_events, openai_chunks
from ._terminal import terminated
from ._wire import ApiError, JSONResponse, result_json

if TYPE_CHECKING:
    from ._state import ServeState

__all__ = ["Api"]


def _int_param(request: Request, name: str, default: int | None, low: int, high: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "invalid_parameter", f"query parameter {name!r} must be an integer") from None
    if not low <= value <= high:
        raise ApiError(400, "invalid_parameter", f"query parameter {name!r} must be in [{low}, {high}]")
    return value


def _chat_key(request: Request) -> str:
    key: str = request.path_params["chat_key"]
    validate_chat_key(key)  # ChatKeyError: 400 naming what is wrong
    return key


def _idempotency_key(request: Request) -> str | None:
    """The ``Idempotency-Key`` header: the turn's request id (durable mode: same key → one turn)."""
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not (0 < len(key) <= 200 and key.isprintable()):
        raise ApiError(
            400, "invalid_request", "the Idempotency-Key header must be 1-200 printable characters"
        )
    return key


def _over_budget(refusal: BudgetRefusal, message: str, request_id: str | None, *, openai: bool) -> Response:
    """HTTP 429 for a turn refused by its chat's budget: ``Retry-After`` says when it resets.

    The body names the budget in the dialect of the endpoint. The OpenAI SDKs wait out a short
    ``Retry-After`` (a reset a minute away) and retry, and give up at once on a long one.
    """
    headers = {"Retry-After": str(refusal.retry_after)}
    detail = refusal.to_json()
    if openai:
        error = {"message": message, "type": "budget_exceeded", "param": None, "code": "budget_exceeded"}
        return JSONResponse({"error": {**error, **detail}}, status_code=429, headers=headers)
    body = {"type": "budget_exceeded", "message": message, "requestId": request_id, **detail}
    return JSONResponse({"error": body}, status_code=429, headers=headers)


def _refused(result: AgentResult, *, openai: bool) -> Response | None:
    if result.budget is None:
        return None
    return _over_budget(result.budget, result.output, result.request_id, openai=openai)


class _TurnApprovals:
    """The approvals one streamed turn asked, registered for the key and chat that may answer."""

    def __init__(self, state: ServeState, key: ApiKey | None, chat_key: str) -> None:
        self.state = state
        self.owner = (key.index if key is not None else None, chat_key)
        self.ids: list[str] = []

    def opened(self, event: ApprovalRequired) -> None:
        self.state.approvals[event.approval_id] = self.owner
        self.ids.append(event.approval_id)

    def close(self) -> None:
        for approval_id in self.ids:
            self.state.approvals.pop(approval_id, None)


class Api:
    """The route handlers, sharing one :class:`ServeState`."""

    def __init__(self, state: ServeState) -> None:
        self.state = state
        self.agent = state.agent

    # -- plain reads -----------------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        status = "stopping" if self.state.closing else "ok"
        # ``auth`` tells a client (the web page) whether to ask for an API key
        return JSONResponse(
            {
                "status": status,
                "activeTurns": self.state.active,
                "auth": self.state.auth.enabled,
                **({"channels": self.state.channels.health_json()} if self.state.channels else {}),
            }
        )

    async def models(self, request: Request) -> Response:
        self.state.caller(request)
        model = {"id": self.agent.config.name, "object": "model", "created": 0, "owned_by": "shipagent"}
        return JSONResponse({"object": "list", "data": [model]})

    async def list_chats(self, request: Request) -> Response:
        key = self.state.caller(request)
        limit = _int_param(request, "limit", 50, 1, 500) or 50
        offset = _int_param(request, "offset", 0, 0, 10**9) or 0
        chats = await self.agent.store.list_chats()  # a cluster's: its database, not this .ship/
        visible = [c for c in chats if key is None or key.allows(c.chat_key)]
        page = visible[offset : offset + limit]
        more = offset + limit < len(visible)
        return JSONResponse(
            {"chats": [c.to_json() for c in page], "nextOffset": offset + limit if more else None}
        )

    async def transcript(self, request: Request) -> Response:
        chat_key = _chat_key(request)
        self.state.caller(request, chat_key)
        limit = _int_param(request, "limit", 50, 1, 1000) or 50
        before = _int_param(request, "before", None, 0, 2**62)
        # ``before`` is the store's cursor: a byte offset in the files, a record seq in a database
        page = await self.agent.store.transcript_page(chat_key, before, limit)
        return JSONResponse({"chatKey": chat_key, "entries": page.entries, "before": page.before})

    async def context_files(self, request: Request) -> Response:
        chat_key = _chat_key(request)
        self.state.caller(request, chat_key)
        limit = _int_param(request, "limit", 100, 1, 1000) or 100
        refs = await self.agent.context_files.alist(chat_key, limit=limit)
        return JSONResponse({"chatKey": chat_key, "files": [r.to_json() for r in refs]})

    async def context_file(self, request: Request) -> Response:
        chat_key = _chat_key(request)
        self.state.caller(request, chat_key)
        ref_id = request.path_params["ref_id"]
        offset = _int_param(request, "offset", 0, 0, 2**62) or 0
        limit = _int_param(request, "limit", 65536, 1, 1 << 20) or 65536
        try:
            page = await self.agent.context_files.aread(chat_key, ref_id, offset, limit)
        except NotFoundError as exc:
            raise ApiError(404, "not_found", str(exc)) from None
        return JSONResponse(
            {
                "id": ref_id,
                "offset": page.offset,
                "nextOffset": page.next_offset,
                "size": page.size,
                "done": page.done,
                "content": page.content,
            }
        )

    async def usage(self, request: Request) -> Response:
        chat_key = _chat_key(request)
        self.state.caller(request, chat_key)
        try:
            report = await self.agent.usage(chat_key)
        except UsageFileError as exc:
            raise ApiError(500, "usage_unreadable", str(exc)) from None
        return JSONResponse(report.to_json())

    async def _check_budget(self, chat_key: str, *, openai: bool) -> Response | None:
        """A streamed turn's 429 before its ``200`` goes out (the turn itself checks again)."""
        if not self.agent.budgets.limited:
            return None
        try:
            refusal = (await self.agent.usage(chat_key)).refused
        except UsageFileError:  # the turn itself says so, as its result
            return None
        if refusal is None:
            return None
        return _over_budget(refusal, refusal.message(), None, openai=openai)

    async def clear_context(self, request: Request) -> Response:
        chat_key = _chat_key(request)
        self.state.caller(request, chat_key)
        # queues behind a running turn of the chat; in a cluster the empty history goes to the
        # database, where every worker's next turn of the chat picks it up (last_committed moves)
        await self.agent.clear(chat_key)
        return JSONResponse({"chatKey": chat_key, "cleared": True})

    # -- turns -----------------------------------------------------------------------------------

    async def post_message(self, request: Request) -> Response:
        chat_key = _chat_key(request)
        key = self.state.caller(request, chat_key)
        body = await read_json(request, self.state.settings.max_body_bytes)
        if not isinstance(body, dict):
            raise ApiError(400, "invalid_request", 'the body must be a JSON object like {"text": "..."}')
        text = body.get("text")
        if not isinstance(text, str):
            got = "missing" if text is None else f"a {type(text).__name__}"
            raise ApiError(400, "invalid_request", f"'text' must be a string (it is {got})")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise ApiError(400, "invalid_request", "'stream' must be true or false")
        idempotency_key = _idempotency_key(request)
        if stream or "text/event-stream" in request.headers.get("accept", ""):
            self.state.check_open()  # before the 200 of an event stream goes out
            if (over := await self._check_budget(chat_key, openai=False)) is not None:
                return over
            events = self.agent.run_stream(
                chat_key,
                text,
                approval_timeout=self.state.settings.approval_timeout_seconds,
                request_id=idempotency_key,
            )
            events = self.state.idempotency.claim(idempotency_key, chat_key).watch(events)  # 409 if reused
            approvals = _TurnApprovals(self.state, key, chat_key)
            notice = self.agent.config.context.chat_history.notice
            body_iter = terminated(
                native_events(events, approvals.opened, notice=notice), "native", idempotency_key
            )
            return EventStream(self._counted(body_iter, approvals), headers=SSE_HEADERS)
        self.state.turn_started()
        try:
            with self.state.idempotency.claim(idempotency_key, chat_key) as claim:  # 409 if reused
                result = claim.settle(await self.agent.run(chat_key, text, request_id=idempotency_key))
        finally:
            self.state.turn_ended()
        return _refused(result, openai=False) or JSONResponse(result_json(result))

    async def chat_completions(self, request: Request) -> Response:
        key = self.state.caller(request)
        body = await read_json(request, self.state.settings.max_body_bytes)
        turn = parse_completion_request(body, request.headers)
        validate_chat_key(turn.chat_key)
        self.state.caller(request, turn.chat_key)
        headers = {IGNORED_HEADER: "system-message"} if turn.ignored_system else {}
        idempotency_key = _idempotency_key(request)
        if turn.stream:
            self.state.check_open()
            if (over := await self._check_budget(turn.chat_key, openai=True)) is not None:
                return over
            events = self.agent.run_stream(
                turn.chat_key,
                turn.text,
                approval_timeout=self.state.settings.approval_timeout_seconds,
                request_id=idempotency_key,
            )
            events = self.state.idempotency.claim(idempotency_key, turn.chat_key).watch(
                events
            )  # 409 if reused
            approvals = _TurnApprovals(self.state, key, turn.chat_key)
            chunks = terminated(openai_chunks(events, turn.model, approvals.opened), "openai")
            return EventStream(self._counted(chunks, approvals), headers={**SSE_HEADERS, **headers})
        self.state.turn_started()
        try:
            with self.state.idempotency.claim(idempotency_key, turn.chat_key) as claim:  # 409 if reused
                result = claim.settle(
                    await self.agent.run(turn.chat_key, turn.text, request_id=idempotency_key)
                )
        finally:
            self.state.turn_ended()
        if (over := _refused(result, openai=True)) is not None:
            return over
        if not result.success:
            error = {"message": result.output, "type": "run_failed", "requestId": result.request_id}
            return JSONResponse({"error": error}, status_code=502, headers=headers)
        return JSONResponse(completion(result, turn.model), headers=headers)

    async def _counted(self, body: AsyncIterator[bytes], approvals: _TurnApprovals) -> AsyncIterator[bytes]:
        """A streamed turn's body, counted as a running turn until it ends (or is cancelled)."""
        self.state.turn_started()
        try:
            async for piece in body:
                yield piece
        finally:
            self.state.turn_ended()
            approvals.close()

    async def answer_approval(self, request: Request) -> Response:
        approval_id = request.path_params["approval_id"]
        key = self.state.caller(request)
        body = await read_json(request, self.state.settings.max_body_bytes)
        approve = body.get("approve") if isinstance(body, dict) else None
        if not isinstance(approve, bool):
            raise ApiError(400, "invalid_request", "'approve' must be true or false: {\"approve\": true}")
        owner = self.state.approvals.get(approval_id)
        if owner is None or self.agent.approvals.chat_key_of(approval_id) is None:
            self.state.approvals.pop(approval_id, None)
            raise ApiError(
                404, "not_found", f"approval {approval_id!r} is not waiting (unknown, answered or timed out)"
            )
        key_index, chat_key = owner
        if key is not None and (key.index != key_index or not key.allows(chat_key)):
            raise ApiError(403, "forbidden", "only the API key that started this turn may answer it")
        self.agent.resolve_approval(approval_id, approve)
        self.state.approvals.pop(approval_id, None)
        return JSONResponse({"approvalId": approval_id, "approved": approve, "chatKey": chat_key})
