"""transformer_jax/sweep/progress.py: the ETA of launches scheduled on slots, the line of a
running group read from its files, and a display that writes no escapes off a terminal."""

import io
import json

import pytest

from transformer_jax.sweep import progress


def test_the_eta_schedules_the_remaining_launches_on_the_slots():
    assert progress.eta([], [5.0], pending=3, parallel=2) is None  # nothing finished yet
    # Quick start: 3 seed groups on 2 slots; the first finished after 60 s, the second has run
    # 58 s and the third takes the freed slot: 60 s to go (a count of runs said 2 x 60 s).
    assert progress.eta([60.0], [58.0], pending=1, parallel=2) == pytest.approx(60.0)
    # Two waiting: one in the freed slot, one after the running group (2 + 60 s).
    assert progress.eta([60.0], [58.0], pending=2, parallel=2) == pytest.approx(62.0)
    # One slot, two waiting after the one running (10 s in): 50 + 60 + 60.
    assert progress.eta([60.0], [10.0], pending=2, parallel=1) == pytest.approx(170.0)
    # A group counts once, whatever its seeds: the mean of launches, not of runs.
    assert progress.eta([30.0, 90.0], [], pending=2, parallel=2) == pytest.approx(60.0)
    assert progress.eta([60.0], [], pending=0, parallel=2) == 0.0
    assert progress.eta([60.0], [100.0], pending=0, parallel=1) == 0.0  # late: not negative


def write_run(path, records, steps=400):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"train": {"steps": steps}}))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_line_of_a_run_is_its_last_train_steps(tmp_path):
    run = tmp_path / "baseline" / "seed_0"
    assert progress.progress_line("baseline/seed_{0,1}", str(run)) == (
        "baseline/seed_{0,1}: starting"
    )
    write_run(
        run,
        [
            {"step": 100, "split": "train", "time": 10.0, "loss": 2.0},
            {"step": 110, "split": "train", "time": 12.0, "loss": 1.5},
            {"step": 110, "split": "validation", "time": 14.0, "loss": 1.0},
            {"step": 120, "split": "train", "time": 16.0, "loss": 1.25},
        ],
    )
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 130, "split": "tr')  # a line being written
    assert progress.progress_line("baseline/seed_{0,1}", str(run)) == (
        "baseline/seed_{0,1}: step 120/400 (30%) | loss 1.25 | 2.50 steps/s"
    )


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_the_display_redraws_on_a_terminal_and_prints_plain_lines_elsewhere():
    plain = io.StringIO()
    display = progress.Display(plain, every_s=30.0)
    display.show(["a: step 1/4", "b: starting"], now=0.0)
    display.show(["a: step 2/4", "b: starting"], now=10.0)  # within 30 s: not printed
    display.clear()
    display.show(["a: step 3/4", "b: step 1/4"], now=31.0)
    assert plain.getvalue() == "a: step 1/4\nb: starting\na: step 3/4\nb: step 1/4\n"
    tty = FakeTTY()
    display = progress.Display(tty)
    display.show(["a: step 1/4", "b: starting"], now=0.0)
    display.show(["a: step 2/4", "b: starting"], now=2.0)
    display.clear()
    assert tty.getvalue() == (
        "a: step 1/4\x1b[K\nb: starting\x1b[K\n"
        "\x1b[2F\x1b[J"
        "a: step 2/4\x1b[K\nb: starting\x1b[K\n"
        "\x1b[2F\x1b[J"
    )
