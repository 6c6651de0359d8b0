"""What `elmo pretrain` shows while it works: one progress bar for preparing the data (the `datasets` library's own
bars switched off meanwhile, and back on afterwards), and a training bar sized by the time budget when there is one."""

from __future__ import annotations

import re
import time

import pytest
from support import reset_accelerate_state

from modeling_elmo.pretraining import main as pretrain_main
from modeling_elmo.pretraining.loop import ProgressBar, TrainClock, busy_machine_warning


def test_without_a_budget_the_bar_counts_updates():
    bar = ProgressBar(total_updates=50, step=10, budget_seconds=None, seconds=0.0, enabled=False)
    assert (bar.total, bar.position) == (50, 10)
    bar.advance(11, 99.0)
    assert bar.position == 11
    bar.close()


def test_under_a_time_budget_the_bar_is_the_budget_and_shows_what_ends_the_run_first():
    bar = ProgressBar(total_updates=100_000, step=0, budget_seconds=480.0, seconds=120.0, enabled=False)
    assert bar.total == 480.0 and bar.position == pytest.approx(120.0)  # a resumed run starts where it was
    bar.advance(10, 240.0)
    assert bar.position == pytest.approx(240.0)
    bar.advance(60_000, 250.0)  # the updates are ahead of the clock: 60% of the run
    assert bar.position == pytest.approx(0.6 * 480)
    bar.advance(60_001, 250.5)  # never goes back
    assert bar.position == pytest.approx(0.6 * 480, rel=1e-3)
    bar.advance(60_002, 10_000.0)
    assert bar.position == pytest.approx(480.0)
    bar.close()


@pytest.mark.slow
def test_a_budgeted_run_shows_one_preparation_bar_and_a_bar_in_minutes(tmp_path, capsys, monkeypatch):
    import sys

    import datasets

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # the preparation bar is drawn on terminals only

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"the cat number {i % 17} sat on the mat .\n" for i in range(300)), encoding="utf-8")
    assert datasets.is_progress_bar_enabled()
    code = pretrain_main(
        [
            "--train-file",
            str(corpus),
            "--output-dir",
            str(tmp_path / "run"),
            "--max-steps",
            "100000",
            "--max-train-minutes",
            "0.06",
            "--per-device-train-batch-size",
            "8",
            "--no-plot",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--checkpointing-steps",
            "0",
        ]
    )
    reset_accelerate_state()
    assert code == 0
    err = capsys.readouterr().err
    assert datasets.is_progress_bar_enabled()  # switched back on
    for theirs in ("Generating train split", "Map", "Filter", "Saving the dataset"):
        assert theirs not in err, f"a datasets progress bar ({theirs!r}) was shown"
    assert "preparing data: 3/3 stages" in err
    assert re.search(r"training minutes: +\d+%\|.*\| \d+\.\d/0\.1 min \[[^]]*updates=\d+", err)
    assert "/100000" not in err  # not the 100,000 updates the budget never reaches


def test_the_training_clock_measures_the_share_of_a_core_the_training_thread_had():
    waiting = TrainClock(5.0)
    time.sleep(0.3)  # a thread that waits has no core: the busy machine's case
    wall, share = waiting.cpu_share()
    assert wall >= 0.3 and 0.0 <= share < 0.2
    start_wall, start_cpu = time.time(), time.thread_time()
    computing = TrainClock(5.0)
    while time.thread_time() - start_cpu < 0.2:  # 0.2 s of CPU, however long the machine takes to give it
        pass
    wall, share = computing.cpu_share()
    used_wall, used_cpu = time.time() - start_wall, time.thread_time() - start_cpu
    assert 0.0 < wall <= used_wall and 0.19 <= share * wall <= used_cpu


def test_a_cpu_run_on_a_busy_machine_says_why_it_made_fewer_updates():
    line = busy_machine_warning(600.0, 0.27, 200)
    assert (
        line.startswith("the machine is busy: the training thread had a CPU core for only 27% of these 10.0 minutes")
        and "200 updates ran (20 per minute)" in line
        and "\n" not in line
    )
    assert busy_machine_warning(600.0, 0.9, 800) is None  # an idle machine
    assert busy_machine_warning(10.0, 0.1, 5) is None  # too short to say
