"""fusegen.autotuning."""
