"""A log line at least once a minute from a long evaluation that writes to a file, not a terminal.

Progress bars are drawn only on a terminal (tqdm's ``disable=None``); in a log file (a batch job, ``nohup``, an
experiment's log) a phase that runs for minutes would otherwise print nothing. :class:`Heartbeat` prints one line on
stderr as soon as the first batch has finished (so its rate is measured, not 0) and then every ``interval`` seconds
while its phase runs -- from a daemon thread, so a single batch that takes longer than a minute still shows life --
naming the phase (and a ``label``: an experiment's cell), how far it is (``count()``, which callers advance per
batch), the elapsed time and the rate, and a last line when a phase that printed any ends. On a terminal it prints
nothing.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from pathlib import Path
from typing import Callable, TextIO

INTERVAL_S = 60.0


class Heartbeat:
    """``with Heartbeat("extraction", lambda: len(done), total=n, unit="windows"): ...`` (see the module docstring).
    ``interval``: default :data:`INTERVAL_S`; ``active``: default, when ``stream`` (stderr) is not a terminal."""

    def __init__(
        self,
        what: str,
        count: Callable[[], int],
        total: int | None = None,
        unit: str = "",
        interval: float | None = None,
        stream: TextIO | None = None,
        active: bool | None = None,
        label: str | None = None,
        poll: float = 1.0,
    ):
        self.what, self.count, self.total, self.unit = what, count, total, unit
        self.label, self.poll = label, poll
        self.interval = INTERVAL_S if interval is None else interval
        self.stream = stream or sys.stderr
        self.active = (not self.stream.isatty()) if active is None else active
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = self._first = 0.0
        self.lines = 0

    def line(self) -> str:
        done, elapsed = self.count(), time.monotonic() - self._start
        rate = (done - self._first) / elapsed if elapsed > 0 else 0.0
        where = (
            f"{done}"
            if self.total is None
            else f"{done}/{self.total}" + (f" ({100 * done / self.total:.0f} %)" if self.total else "")
        )
        unit = f" {self.unit}" if self.unit else ""
        what = f"{self.what} [{self.label}]" if self.label else self.what
        return f"{what}: {where}{unit}, {elapsed / 60:.1f} min, {rate:.2f}{unit}/s"

    def _beat(self) -> None:
        """A line once the first batch has finished (its rate is then a measured one), then every ``interval``."""
        last, first_seen = time.monotonic(), False
        while not self._stop.wait(min(self.poll, self.interval)):
            now = time.monotonic()
            moved = not first_seen and self.count() != self._first
            if moved or now - last >= self.interval:
                first_seen = first_seen or moved or self.count() != self._first
                last = now
                self._print(self.line())

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)
        self.lines += 1

    def __enter__(self) -> "Heartbeat":
        self._start, self._first = time.monotonic(), self.count()
        if self.active:
            self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{self.what}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lines and exc_type is None:
            self._print(self.line() + " (done)")


def label(out) -> str:
    """What the heartbeat lines name: an out folder's last parts (an experiment's cells/<cell>/eval names its
    cell)."""
    return "/".join(Path(str(out)).parts[-3:])


def for_shard(shard, *args, **kwargs):
    """A log line at least once a minute from rank 0 (:class:`Heartbeat`); nothing from the other ranks of a
    split evaluation (``shard``: :class:`goldfish.eval.shard.Shard`)."""
    return Heartbeat(*args, **kwargs) if shard.main else contextlib.nullcontext()
