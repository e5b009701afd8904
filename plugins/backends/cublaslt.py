"""Placeholder until the cublaslt backend lands (registers nothing)."""
