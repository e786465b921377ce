"""The hosts on top of the core: the command line, the server, durable workers."""
