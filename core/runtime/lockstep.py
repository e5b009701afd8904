"""N copies of one program in lockstep, meeting at collectives (fusegen; no XLA counterpart).

Each device's copy runs on its own thread, but only one thread runs at a time: the one holding the turn.
A copy runs until it reaches a collective; it leaves its operands there and hands the turn to the next
copy (round robin) until the last member of its group arrives, which computes every member's result and
runs on. So the copies' kernels never run concurrently (the executor's caches, the Triton interpreter and
the timing need no locks), the order of everything is deterministic, and a collective that some member
never reaches (the copies' control flow diverged) is reported, not waited for.

A collective is matched by ``(computation, instruction, how many times this device ran it before)`` and its
group, so copies that evaluate different module objects of the same program (the f64 oracle promotes a copy
per device) still meet.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from fusegen.evaluator.collectives import MultiDeviceUnsupported

__all__ = ["Lockstep"]


class _Abort(BaseException):
    """Unwinds a copy whose run was ended by another copy's error."""


class Lockstep:
    """Runs ``fn(device)`` for every device of ``n`` in lockstep (see the module docstring).

    ``meet`` is called by a running copy at a collective.
    """

    def __init__(self, n: int):
        self.n = n
        self._lock = threading.Lock()
        self._cvs = [threading.Condition(self._lock) for _ in range(n)]  # one per device: wake only the next
        self._turn = 0
        self._state = ["ready"] * n  # ready | waiting | done
        self._pending: dict[tuple, dict[int, Any]] = {}
        self._results: dict[tuple, Any] = {}
        self._seen: list[dict[tuple, int]] = [{} for _ in range(n)]
        self._error: BaseException | None = None

    # -- scheduling (called with the lock held) -----------------------------------------------------------
    def _wake_all(self) -> None:
        for cv in self._cvs:
            cv.notify_all()

    def _fail(self, e: BaseException) -> None:
        if self._error is None:
            self._error = e
        self._wake_all()

    def _pass(self, d: int) -> None:
        for k in range(1, self.n + 1):
            j = (d + k) % self.n
            if self._state[j] == "ready":
                self._turn = j
                self._cvs[j].notify()
                return
        if any(s == "waiting" for s in self._state):
            self._fail(MultiDeviceUnsupported(self._deadlock()))
        self._wake_all()

    def _deadlock(self) -> str:
        parts = []
        for (where, count, group), slot in self._pending.items():
            missing = [g for g in group if g not in slot]
            parts.append(f"%{where[1]} (computation %{where[0]}, execution {count}): devices {sorted(slot)} of group "
                         f"{list(group)} arrived, {missing} never did")
        done = [d for d, s in enumerate(self._state) if s == "done"]
        return ("the partitions' copies diverged: " + "; ".join(parts)
                + (f" (devices {done} finished)" if done else ""))

    # -- the interface -------------------------------------------------------------------------------------
    def meet(self, device: int, where: tuple[str, str], group: list[int], contribution: Any,
             compute: Callable[[list[Any]], list[Any]]) -> Any:
        """Leave ``contribution`` at collective ``where`` for ``group`` (device ids, group order); returns this
        device's result once every member has arrived. The last to arrive calls ``compute(contributions in
        group order)`` -> results in group order.

        Raises:
            what ``compute`` raises (in the device that ran it; the others are unwound), or
            MultiDeviceUnsupported: the members never all arrive.
        """
        with self._lock:
            count = self._seen[device].get(where, 0)
            self._seen[device][where] = count + 1
            key = (where, count, tuple(group))
            slot = self._pending.setdefault(key, {})
            slot[device] = contribution
            if len(slot) == len(group):
                del self._pending[key]
                try:
                    values = compute([slot[g] for g in group])
                except BaseException as e:
                    self._fail(e)
                    raise
                for g, v in zip(group, values):
                    self._results[(key, g)] = v
                    if g != device and self._state[g] == "waiting":
                        self._state[g] = "ready"
                return self._results.pop((key, device))
            self._state[device] = "waiting"
            self._pass(device)
            while True:
                if self._error is not None:
                    raise _Abort()
                if self._turn == device and (key, device) in self._results:
                    return self._results.pop((key, device))
                self._cvs[device].wait()

    def run(self, fn: Callable[[int], Any]) -> list[Any]:
        """``[fn(0), ..., fn(n-1)]`` run in lockstep; the first error any copy raised is raised here."""
        results: list[Any] = [None] * self.n

        def body(d: int) -> None:
            with self._lock:
                while self._turn != d and self._error is None:
                    self._cvs[d].wait()
                if self._error is not None:
                    self._state[d] = "done"
                    return
            try:
                results[d] = fn(d)
            except _Abort:
                pass
            except BaseException as e:
                with self._lock:
                    self._fail(e)
            finally:
                with self._lock:
                    self._state[d] = "done"
                    if self._error is None:
                        self._pass(d)

        if self.n == 1:
            return [fn(0)]
        threads = [threading.Thread(target=body, args=(d,), name=f"fusegen-device-{d}", daemon=True)
                   for d in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self._error is not None:
            raise self._error
        return results
