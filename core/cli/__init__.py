"""fusegen.cli."""
