"""Built-in codegen/execution backend plugins."""
