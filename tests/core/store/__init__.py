"""The ChatStore conformance suite, run against every backend."""
