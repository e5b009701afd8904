"""fusegen.passes."""
