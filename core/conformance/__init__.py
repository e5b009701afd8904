"""fusegen.conformance."""
