"""Built-in fusegen plugins (each module registered through its own entry point)."""
