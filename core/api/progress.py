"""Progress of the library's loops (run's fusions, tune's instructions, Ray's tasks) through one callback.

The library never draws: each loop reports :class:`ProgressEvent` values to the ``progress`` a call was given:

* ``None`` (the default): nothing;
* a callable ``f(event: ProgressEvent) -> None`` (the CLI's draws a ``rich`` bar; a notebook can print);
* ``"tqdm"``: a ``tqdm.auto`` bar per task (``pip install tqdm``; :class:`ImportError` naming it otherwise).

:class:`Progress` turns the callback into the ``add_task`` / ``update`` / ``advance`` calls the autotuner and
the Ray driver make (the subset of ``rich.progress.Progress`` they use), so those loops need no change to
report to a notebook. No XLA counterpart (XLA logs with ``VLOG``).
"""

from __future__ import annotations

from typing import Any, Callable

import attrs


@attrs.frozen
class ProgressEvent:
    """One step of a loop.

    Attributes:
        task: what the loop does (``"running fusions"``, ``"autotuning"``, ``"tuning on Ray"``).
        done: steps finished so far (fusions, instructions, unique instructions).
        total: steps in all (``None`` when unknown).
        note: what the last step was, or the loop's own status text (``""`` when none).
        finished: the loop ended (the last event of a task).
    """

    task: str
    done: int
    total: int | None
    note: str = ""
    finished: bool = False


ProgressCallback = Callable[[ProgressEvent], None]


class Progress:
    """A ``rich.progress.Progress``-shaped sink (``add_task``, ``update``, ``advance``, a context manager) that
    reports every change to ``callback`` as a :class:`ProgressEvent`."""

    def __init__(self, callback: ProgressCallback):
        self.callback = callback
        self._tasks: dict[int, list] = {}  # id -> [description, done, total, note]

    def add_task(self, description: str, total: float | None = None, **_: Any) -> int:
        tid = len(self._tasks)
        self._tasks[tid] = [description, 0, None if total is None else int(total), ""]
        self._emit(tid)
        return tid

    def update(self, task_id: int, *, advance: float = 0, description: str | None = None,
               total: float | None = None, **_: Any) -> None:
        t = self._tasks[task_id]
        t[1] += int(advance)
        if total is not None:
            t[2] = int(total)
        if description is not None:
            t[3] = description
        self._emit(task_id)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def finish(self) -> None:
        """Report the end of every task (the last event of each has ``finished=True``)."""
        for tid in list(self._tasks):
            self._emit(tid, finished=True)
        self._tasks.clear()

    def _emit(self, tid: int, finished: bool = False) -> None:
        desc, done, total, note = self._tasks[tid]
        self.callback(ProgressEvent(desc, done, total, note, finished))

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.finish()


def tqdm_callback() -> ProgressCallback:
    """A callback drawing one ``tqdm.auto`` bar per task (a notebook widget in Jupyter, text elsewhere).

    Raises:
        ImportError: tqdm is not installed (the message says ``pip install tqdm``).
    """
    try:
        from tqdm.auto import tqdm
    except ImportError:
        raise ImportError("progress='tqdm' needs tqdm: pip install tqdm (or pass progress=None, or a callable "
                          "taking a fusegen.api.ProgressEvent)") from None
    bars: dict[str, Any] = {}

    def draw(e: ProgressEvent) -> None:
        bar = bars.get(e.task)
        if bar is None:
            bar = bars[e.task] = tqdm(total=e.total, desc=e.task, leave=False)
        if e.total is not None and bar.total != e.total:
            bar.total = e.total
        bar.update(e.done - bar.n)
        if e.note:
            bar.set_postfix_str(e.note, refresh=False)
        if e.finished:
            bar.close()
            bars.pop(e.task, None)

    return draw


def progress_sink(progress: Any) -> Progress | None:
    """The :class:`Progress` a loop reports to, for a call's ``progress`` argument (``None``, a callable,
    ``"tqdm"``, or a ``Progress`` already).

    Raises:
        ValueError: another string; TypeError: not callable; ImportError: ``"tqdm"`` without tqdm.
    """
    if progress is None or isinstance(progress, Progress):
        return progress
    if isinstance(progress, str):
        if progress != "tqdm":
            raise ValueError(f"progress={progress!r}: give None, 'tqdm', or a callable taking a ProgressEvent")
        return Progress(tqdm_callback())
    if not callable(progress):
        raise TypeError(f"progress={progress!r} is not callable (give None, 'tqdm', or f(ProgressEvent))")
    return Progress(progress)
