"""fusegen.config."""
