"""``python -m fusegen ARGS``: the ``fusegen`` command (:func:`fusegen.cli.main.main`), the same exit codes and
output, for an environment whose ``bin`` is not on ``PATH``."""

from fusegen.cli.main import main

if __name__ == "__main__":
    main()
