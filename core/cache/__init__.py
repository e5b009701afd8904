"""fusegen.cache."""
