"""The core: the agent and its turn, the context window, the stores, config, chat keys, results."""
