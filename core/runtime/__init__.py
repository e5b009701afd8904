"""fusegen.runtime."""
