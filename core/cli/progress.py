"""The CLI's drawing of the library's progress events: a transient ``rich`` bar per task, on stderr."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator


@contextlib.contextmanager
def rich_progress(enabled: bool) -> Iterator[Any]:
    """A callback for the library's ``progress=`` drawing rich bars (``None`` when not ``enabled``)."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(console=Console(stderr=True), transient=True)
    tasks: dict[str, Any] = {}

    def draw(e: Any) -> None:
        tid = tasks.get(e.task)
        if tid is None:
            tid = tasks[e.task] = bar.add_task(e.task, total=e.total)
        bar.update(tid, completed=e.done, total=e.total, description=e.note or e.task)
        if e.finished:
            bar.remove_task(tasks.pop(e.task))

    with bar:
        yield draw
