"""fusegen.analysis."""
