"""HLO IR, text parser and printer. Imports nothing else of fusegen."""
