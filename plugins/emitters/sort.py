"""Placeholder until the sort emitter lands (registers nothing)."""
