"""The verdict of ``fusegen run`` (issue 9): per-fusion error budgets (:mod:`.budget`), ``ok`` / ``drift`` /
``mismatch`` per module output against the f64 oracle (:mod:`fusegen.evaluator.promote`) with a pointer to the
first fusion out of budget (:mod:`.verdict`), a run composed with its verdict (:mod:`.judged_run`) and the
mutation check (:mod:`.mutate`); the ``[verify]`` options are config's (:mod:`fusegen.config.verify_options`)."""
