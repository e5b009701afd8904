"""A plugin whose import fails (a dependency its author forgot to declare)."""

import fusegen_test_no_such_dependency  # noqa: F401
