"""fusegen.codegen."""
