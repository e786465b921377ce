"""The long-running commands log to the stderr of the moment, once, however often they run in a process."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from shipagent.hosts.cli._opts import log_to_stderr


def test_the_log_follows_sys_stderr_and_is_installed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    logger = logging.getLogger("shipagent")
    before, level = list(logger.handlers), logger.level
    try:
        first, second = io.StringIO(), io.StringIO()
        monkeypatch.setattr(sys, "stderr", first)
        log_to_stderr()
        log_to_stderr()  # a second command in the same process
        added = [h for h in logger.handlers if h not in before]
        assert len(added) == 1
        logging.getLogger("shipagent.hosts.serve").info("one")
        first.close()  # a test runner's capture, closed after its command
        monkeypatch.setattr(sys, "stderr", second)
        logging.getLogger("shipagent.hosts.serve").info("two")
        assert second.getvalue().rstrip().endswith("INFO shipagent.hosts.serve: two")
    finally:
        for handler in [h for h in logger.handlers if h not in before]:
            logger.removeHandler(handler)
        logger.setLevel(level)
