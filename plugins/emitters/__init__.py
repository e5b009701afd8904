"""Built-in emitter plugins."""
