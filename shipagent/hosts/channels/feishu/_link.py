"""lark-oapi's long connection (``lark.ws.Client``), run on its own thread and event loop.

``lark.ws.Client`` asks ``POST {domain}/callback/ws/endpoint`` (the app id and secret in the body)
for a WebSocket URL and the reconnect / ping settings, connects, pings, reassembles events sent
in several frames, hands each event to the dispatcher and acknowledges its frame with the
handler's outcome (200, or 500 when the handler raised: Feishu then delivers it again). After a
lost connection it reconnects by itself, and Feishu may then deliver again events it had sent.

Why a thread: the client is written for a process of its own. ``start()`` blocks forever
(``loop.run_until_complete``), every task it makes goes onto a module-level ``loop`` chosen when
``lark_oapi.ws.client`` is imported, and it asks for the endpoint with ``requests`` (blocking I/O).
So it runs on a thread with a new event loop, set as that module's ``loop`` before ``start()``
(one long connection per process), and the handler hands each event over to the channel's loop,
waiting until the channel recorded it, so the acknowledgement means "accepted".

The client has no public way to tell that it is connected or to stop. Two of its attributes are
read for that, nothing else: ``_conn`` (the open WebSocket, ``None`` between connections) for
health, and the same to close the socket when the channel stops, after the loop's tasks (receive,
ping, reconnect) were cancelled so that nothing reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["LongConnection"]

log = logging.getLogger("shipagent.hosts.channels.feishu")


class LongConnection:
    """One ``lark.ws.Client`` on a daemon thread; ``on_message(event)`` and ``on_press(callback)``
    (which returns the toast the one who pressed sees) run on that thread."""

    def __init__(
        self,
        *,
        app_id: str,
        app_secret: str,
        domain: str,
        on_message: Callable[[dict[str, Any]], None],
        on_state: Callable[[bool, str | None], None],
        on_press: Callable[[dict[str, Any]], str],
    ) -> None:
        self._app_id = app_id
        self._secret = app_secret
        self._domain = domain
        self._on_message = on_message
        self._on_state = on_state
        self._on_press = on_press
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._thread: threading.Thread | None = None
        self.failure: str | None = None
        """Why the client gave up (its ``start()`` raised), said without the secret."""

    def start(self) -> None:
        """Start the thread (returns at once; :attr:`connected` says when the socket is open)."""
        self._thread = threading.Thread(target=self._run, name="feishu-long-connection", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def connected(self) -> bool:
        return self._client is not None and getattr(self._client, "_conn", None) is not None

    def _handler(self) -> Any:
        import lark_oapi as lark  # type: ignore[import-untyped]
        from lark_oapi.event.callback.model.p2_card_action_trigger import (  # type: ignore[import-untyped]
            P2CardActionTriggerResponse,
        )

        def on_receive(data: Any) -> None:
            self._on_message(json.loads(lark.JSON.marshal(data) or "{}"))

        def on_card(data: Any) -> Any:
            toast = self._on_press(json.loads(lark.JSON.marshal(data) or "{}"))
            return P2CardActionTriggerResponse({"toast": {"type": "info", "content": toast}} if toast else {})

        return (
            lark.EventDispatcherHandler.builder("", "")
            .register_p2_im_message_receive_v1(on_receive)
            .register_p2_card_action_trigger(on_card)
            .build()
        )

    def _run(self) -> None:
        import lark_oapi as lark  # type: ignore[import-untyped]
        import lark_oapi.ws.client as ws_client  # type: ignore[import-untyped]

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        ws_client.loop = loop  # the client's tasks and run_until_complete use this module's loop
        self._loop = loop
        self._client = lark.ws.Client(
            self._app_id,
            self._secret,
            event_handler=self._handler(),
            domain=self._domain,
            log_level=lark.LogLevel.WARNING,
        )
        self._client.on_reconnecting = lambda: self._on_state(
            False, "the long connection was lost; reconnecting"
        )
        self._client.on_reconnected = lambda: self._on_state(True, None)
        try:
            self._client.start()
        except (asyncio.CancelledError, RuntimeError):
            pass  # stopped by :meth:`stop`
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            self.failure = text.replace(self._secret, "[secret]") if self._secret else text
            self._on_state(False, self.failure)
        finally:
            left = asyncio.all_tasks(loop)  # e.g. the client's cache timer when start() failed
            for task in left:
                task.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _halt(self) -> None:
        """On the client's loop: cancel its tasks (no reconnect after this), close the socket, then
        end ``start()`` by cancelling the task it waits on."""
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        waiting = [t for t in tasks if getattr(t.get_coro(), "__name__", "") == "_select"]
        others = [t for t in tasks if t not in waiting]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        conn = getattr(self._client, "_conn", None)
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 2.0)
        for task in waiting:
            task.cancel()

    def stop(self, timeout: float = 5.0) -> None:
        """Close the connection and end the thread (blocking: call it from a worker thread)."""
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                asyncio.run_coroutine_threadsafe(self._halt(), loop)
        if thread is not None:
            thread.join(timeout)
