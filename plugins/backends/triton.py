"""Placeholder until the triton backend lands (registers nothing)."""
