"""Harness episodes: a CLI agent's model calls, captured token-exact on their way to the engine."""
