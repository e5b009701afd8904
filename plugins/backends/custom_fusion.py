"""Placeholder until the custom_fusion backend lands (registers nothing)."""
