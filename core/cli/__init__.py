"""fusegen.cli.

The command line runs numpy's OpenBLAS on one thread unless ``OPENBLAS_NUM_THREADS`` is set: its GEMMs
(the interpreter's ``tl.dot``, the reference evaluator's dots) are small enough that a second thread spins
more CPU time than it saves, and OpenBLAS splits a GEMM over M and N only, so every value is the same.
Set before numpy is imported (a library import of ``fusegen`` leaves it alone).
"""

import os as _os

_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
