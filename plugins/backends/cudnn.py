"""Placeholder until the cudnn backend lands (registers nothing)."""
