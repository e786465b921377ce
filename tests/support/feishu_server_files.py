"""The local Feishu server's people and files: the contact API (names, refused without the scope),
the files users sent (served from their message) and the images and files the bot uploaded
(multipart, with Feishu's size limits). :class:`tests.support.feishu_server.FakeFeishu` mixes it in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = ["FILE_TYPES", "MAX_FILE", "MAX_IMAGE", "NO_SCOPE", "FilesAndPeople", "Upload"]

MAX_IMAGE = 10 * 1024 * 1024
MAX_FILE = 30 * 1024 * 1024
FILE_TYPES = ("opus", "mp4", "pdf", "doc", "xls", "ppt", "stream")
NO_SCOPE = 99991672


@dataclass(frozen=True, slots=True)
class Upload:
    """An image or file the bot uploaded: its key, ``image`` or a file type, name and bytes."""

    key: str
    kind: str
    name: str
    data: bytes


class FilesAndPeople:
    """The state and routes of names and files (a part of the fake server)."""

    def _next(self, prefix: str) -> str:
        raise NotImplementedError  # the server's id maker

    def _init_files(self) -> None:
        self.users: dict[str, str] = {}  # open_id -> name, what the contact API answers
        self.contact_delay = 0.0
        """Seconds the contact API takes to answer (a slow or hung Feishu)."""
        self.contact_scope = True
        """Whether the app has ``contact:user.base:readonly`` (without it, lookups are refused)."""
        # (message id, key) -> (``image`` or ``file``, the bytes, the file name)
        self.resources: dict[tuple[str, str], tuple[str, bytes, str]] = {}
        self.uploads: dict[str, Upload] = {}

    def _user(self, user_id: str, id_type: str | None) -> web.Response:
        if not self.contact_scope:
            return web.json_response(
                {
                    "code": NO_SCOPE,
                    "msg": "Access denied. One of the following scopes is required: "
                    "[contact:user.base:readonly]",
                },
                status=400,
            )
        if id_type != "open_id":
            return web.json_response(
                {"code": 99992402, "msg": "user_id_type must be open_id here"}, status=400
            )
        name = self.users.get(user_id)
        if name is None:
            return web.json_response({"code": 41050, "msg": "no user authority error"}, status=400)
        return web.json_response(
            {"code": 0, "msg": "success", "data": {"user": {"open_id": user_id, "name": name}}}
        )

    def _resource(self, message_id: str, key: str, kind: str | None) -> web.Response:
        found = self.resources.get((message_id, key))
        if found is None or found[0] != kind:
            return web.json_response(
                {"code": 234003, "msg": "the file is not in the message, or the type is wrong"}, status=400
            )
        return web.Response(
            body=found[1],
            content_type="application/octet-stream",
            headers={"Content-Disposition": f'attachment; filename="{found[2]}"'},
        )

    def _upload(self, what: str, body: dict[str, Any], files: dict[str, tuple[str, bytes]]) -> web.Response:
        field, limit = ("image", MAX_IMAGE) if what == "images" else ("file", MAX_FILE)
        if field not in files:
            return web.json_response({"code": 234001, "msg": f"{field} is required"}, status=400)
        name, data = files[field]
        if not data or len(data) > limit:
            return web.json_response({"code": 234006, "msg": "the file is empty or too large"}, status=400)
        if what == "images":
            if body.get("image_type") != "message":
                return web.json_response({"code": 234001, "msg": "image_type must be message"}, status=400)
            upload = Upload(self._next("img_v3_bot_"), "image", name, data)
            self.uploads[upload.key] = upload
            return web.json_response({"code": 0, "msg": "success", "data": {"image_key": upload.key}})
        if body.get("file_type") not in FILE_TYPES or not body.get("file_name"):
            return web.json_response({"code": 234001, "msg": "file_type or file_name is wrong"}, status=400)
        upload = Upload(self._next("file_v3_bot_"), str(body["file_type"]), str(body["file_name"]), data)
        self.uploads[upload.key] = upload
        return web.json_response({"code": 0, "msg": "success", "data": {"file_key": upload.key}})

    def _unknown_upload(self, kind: str, content: dict[str, Any]) -> str | None:
        """The first image or file key a bot's message names that was never uploaded (as its kind)."""
        keys: list[Any] = []
        if kind == "image":
            keys = [content.get("image_key")]
        elif kind == "file":
            keys = [content.get("file_key")]
        elif kind == "post":
            body_ = content.get("zh_cn") or next(iter(content.values()), {})
            keys = [
                e.get("image_key") for line in body_.get("content", []) for e in line if e.get("tag") == "img"
            ]
        for key in keys:
            upload = self.uploads.get(str(key))
            if upload is None or (upload.kind == "image") != (kind != "file"):
                return str(key)
        return None
