"""The time breakdown of a run: exclusive phases, the process age, the printed line."""

import subprocess
import sys
import time

import pytest

from transformer_jax.train import timing
from transformer_jax.train.timing import Phases, breakdown_line


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    """The clock Phases reads, advanced by hand."""
    fake = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", fake)
    return fake


def test_nested_phases_are_exclusive_and_the_rest_is_other(clock, monkeypatch):
    monkeypatch.setattr(timing, "process_age_s", lambda: 4.0)
    phases = Phases()
    with phases("train"):
        clock.now += 10.0
        with phases("eval"):
            clock.now += 3.0
            with phases("decode"):
                clock.now += 2.0
        with phases("compile"):
            clock.now += 5.0
    clock.now += 1.0  # outside every phase
    with phases("eval"):  # a phase entered twice accumulates
        clock.now += 0.5
    out = phases.breakdown()
    assert out["train"] == 10.0 and out["eval"] == 3.5 and out["decode"] == 2.0
    assert out["compile"] == 5.0 and out["other"] == 1.0 and out["data"] == 0.0
    assert out["startup"] == 4.0 and out["total"] == 4.0 + 21.5
    line = breakdown_line(out)
    assert line == (
        "time: 25.5 s = startup 4.0 + compile 5.0 + train 10.0 + eval 3.5 + decode 2.0 + other 1.0"
    )


def test_cpu_seconds_are_exclusive_per_phase_like_the_wall_time(clock, monkeypatch):
    """CPU time (every thread's) may run ahead of the wall clock (two busy cores) or behind it
    (a wait); each phase gets its own, less what the phases nested in it took."""
    cpu = FakeClock()
    monkeypatch.setattr(timing.time, "process_time", cpu)
    phases = Phases()
    with phases("train"):
        clock.now, cpu.now = clock.now + 10.0, cpu.now + 18.0
        with phases("checkpoint"):
            clock.now, cpu.now = clock.now + 2.0, cpu.now + 0.5
        with phases("eval"):
            cpu.now += 3.0
            with phases("decode"):
                cpu.now += 1.0
            with phases("eval"):  # re-entered inside itself: counted once
                cpu.now += 0.25
    out = phases.cpu_seconds()
    assert out["train"] == 18.0 and out["checkpoint"] == 0.5
    assert out["eval"] == 3.25 and out["decode"] == 1.0 and out["compile"] == 0.0
    assert phases.breakdown()["train"] == 10.0


def test_open_phases_count_up_to_the_breakdown(clock):
    """A run stopped by a signal writes its summary inside the training loop."""
    phases = Phases()
    with phases("train"):
        clock.now += 4.0
        with phases("eval"):
            clock.now += 1.0
        with phases("checkpoint"):
            clock.now += 2.0
            out = phases.breakdown()
    assert (out["train"], out["eval"], out["checkpoint"], out["other"]) == (4.0, 1.0, 2.0, 0.0)
    assert phases.breakdown()["train"] == 4.0  # closed now: nothing counted twice


def test_a_phase_raising_is_still_timed(clock):
    phases = Phases()
    with pytest.raises(RuntimeError), phases("checkpoint"):
        clock.now += 2.0
        raise RuntimeError("disk full")
    assert phases.breakdown()["checkpoint"] == 2.0


def test_unknown_phase_is_refused():
    phases = Phases()
    with pytest.raises(ValueError, match="phase='evaluation' is not a timed phase; valid:"):
        phases("evaluation").__enter__()


def test_process_age_counts_from_the_process_start():
    # A fresh interpreter that sleeps before asking: its age includes the sleep.
    code = "import time; time.sleep(0.5); from transformer_jax.train import timing; "
    code += "print(timing.process_age_s())"
    started = time.monotonic()
    age = float(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
    )
    # At most the time this test waited for it (at any machine speed), give or take the two
    # clock ticks (10 ms each) of /proc's start time and uptime.
    assert 0.5 <= age <= time.monotonic() - started + 0.02


def test_the_logger_does_not_import_torch():
    code = "import sys, transformer_jax.train.logger; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
