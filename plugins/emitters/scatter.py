"""Placeholder until the scatter emitter lands (registers nothing)."""
