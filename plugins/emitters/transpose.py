"""Placeholder until the transpose emitter lands (registers nothing)."""
