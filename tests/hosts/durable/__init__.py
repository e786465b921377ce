"""Durable mode: workers on SQLite or Postgres, clusters, and what a cluster shares."""
