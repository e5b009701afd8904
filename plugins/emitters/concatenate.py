"""Placeholder until the concatenate emitter lands (registers nothing)."""
