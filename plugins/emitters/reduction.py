"""Placeholder until the reduction emitter lands (registers nothing)."""
