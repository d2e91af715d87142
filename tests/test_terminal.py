"""``contextembed._runtime.terminal.progress_bar``: 0/N at once, the last line (100%) once, nothing when off."""

from __future__ import annotations

import io
import time

from contextembed._runtime import terminal


def _drawn(steps, total=3, show=True, pause=0.12) -> str:
    stream = io.StringIO()
    with terminal.stderr_to(stream):
        with terminal.progress_bar(total, unit="sent", show=show) as bar:
            for n in steps:
                time.sleep(pause)  # past tqdm's 0.1 s between draws: every update would draw
                bar.update(n)
    return stream.getvalue()


def test_the_bar_shows_zero_at_once_and_its_last_line_once():
    drawn = _drawn([1, 1, 1])
    states = [state for state in drawn.split("\r") if state.strip()]
    assert states[0].lstrip().startswith("0%") and "0/3" in states[0]
    assert sum("3/3" in state for state in states) == 1 and drawn.count("100%") == 1
    assert states[-1].endswith("\n") and "2/3" in states[-2]  # the steps before the last were drawn


def test_one_update_of_everything_is_drawn_once_and_a_bar_closed_early_shows_where_it_stopped():
    assert _drawn([3]).count("3/3") == 1
    early = _drawn([1])
    assert early.rstrip("\n").rsplit("\r", 1)[-1].lstrip().startswith("33%") and "100%" not in early


def test_a_bar_that_goes_past_its_total_or_has_none_still_counts():
    assert _drawn([2, 2]).rstrip().rsplit("\r", 1)[-1].startswith("4sent")  # tqdm's form past the total
    stream = io.StringIO()
    with terminal.stderr_to(stream):
        with terminal.progress_bar(None, unit="sent") as bar:
            bar.update(5)
    assert "5sent" in stream.getvalue().replace(" ", "")


def test_a_bar_that_is_off_draws_nothing():
    assert _drawn([1, 1, 1], show=False) == ""
