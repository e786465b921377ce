"""The command line: ``shipagent init``, ``chat``, ``check``, ``inspect`` and its errors."""
