"""The tools: builtins, shell and sandbox, context files, handover, MCP, context providers, skills."""
