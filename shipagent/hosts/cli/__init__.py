"""The ``shipagent`` command: one typer app; each command group in a module of its own.

``_app`` holds the app and the core commands (``init``, ``chat``, ``run``, ``check``, ``inspect``);
the other groups (``files``, ``ledger``, ``mcp``, ``stores``, and the hosts' own) are loaded only
when their command runs (``_lazy``), so ``shipagent --help`` stays fast. Nothing is imported
here: the command's entry point is ``_app:main``.
"""
