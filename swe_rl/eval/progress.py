"""The progress line of an eval or certification run: a counter and the statuses seen so far.

tqdm draws it when installed and the output is a terminal; written to a file or a pipe (a log), the
bar's carriage-return frames would pile up on one long line, so there it is one plain line per
finished instance instead (``use_tqdm`` forces either).
"""

from __future__ import annotations

import sys
from typing import IO, Any

__all__ = ["StatusBar"]


class StatusBar:
    """Counts statuses as instances finish; every frame drawn shows counts that add up to the counter."""

    def __init__(
        self, total: int, disabled: bool, file: IO[str] | None = None, use_tqdm: bool | None = None
    ) -> None:
        self.counts: dict[str, int] = {}
        self.bar: Any = None
        self.file = file
        if use_tqdm is None:  # a bar only where a terminal redraws it (tqdm writes to stderr by default)
            use_tqdm = _is_terminal(file if file is not None else sys.stderr)
        if not disabled and use_tqdm:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="inst", dynamic_ncols=True, file=file)
            except ImportError:
                pass
        self.total, self.done, self.disabled = total, 0, disabled

    def update(self, status: str) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1
        self.done += 1
        text = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        if self.bar is not None:
            # counts and counter change together, then one frame (a postfix set with refresh draws
            # the new counts next to the old counter)
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(1)
            self.bar.refresh()
        elif not self.disabled:
            print(f"[{self.done}/{self.total}] {text}", file=self.file, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream
        return False
