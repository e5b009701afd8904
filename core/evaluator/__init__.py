"""fusegen.evaluator."""
