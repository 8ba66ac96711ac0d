"""train.profile_steps: a jax.profiler trace of exactly the configured steps in RUN/profile/,
closed however the loop ends; a bad window is refused naming the field."""

import gzip
import json
import re

import pytest
from train_fixtures import tiny_config

from transformer_jax import run_dir
from transformer_jax.config import TrainConfig
from transformer_jax.train import profile
from transformer_jax.train.trainer import train_and_evaluate


def test_a_profiled_run_traces_its_window_into_the_run_directory(tmp_path):
    workdir = tmp_path / "run"
    config = tiny_config(tmp_path / "tfds", steps_=6, profile_steps=(2, 4), generate_eval=False)
    train_and_evaluate(config, str(workdir))
    traces = list((workdir / run_dir.PROFILE_DIR).rglob("*.xplane.pb"))
    assert len(traces) == 1 and traces[0].stat().st_size > 0
    # The trace viewer's events: the solo program's step (train/trainer.py) dispatched twice,
    # the steps that took the counter from 2 to 4.
    (events_file,) = traces[0].parent.glob("*.trace.json.gz")
    events = json.loads(gzip.decompress(events_file.read_bytes()))["traceEvents"]
    steps = [e for e in events if re.fullmatch(r"\$trainer\.py:\d+ step", e.get("name", ""))]
    assert len(steps) == 2


class _Recorder:
    """jax.profiler's start and stop, and jax.block_until_ready, as a list of calls."""

    def __init__(self):
        self.calls, self.step = [], None

    def start_trace(self, log_dir):
        self.calls.append(f"start before step {self.step} into {log_dir}")

    def stop_trace(self):
        self.calls.append("stop")


@pytest.fixture
def recorder(monkeypatch):
    fake = _Recorder()
    monkeypatch.setattr(profile.jax, "profiler", fake)
    monkeypatch.setattr(profile.jax, "block_until_ready", lambda _: fake.calls.append("wait"))
    return fake


def _loop(profiler, recorder, first: int, last: int, fail_at: int | None = None):
    """The loop's calls (train/loop.py `_train`) for the steps from `first` to `last`."""
    with profiler:
        for step in range(first, last):
            recorder.step = step
            profiler.before_step(step)
            if step == fail_at:
                raise RuntimeError("step failed")
            profiler.after_step(step + 1, metrics=None)


@pytest.mark.parametrize(
    ("first", "last", "fail_at", "calls"),
    [
        (0, 10, None, ["start before step 2", "wait", "stop"]),  # stops once step 4 is ready
        (0, 3, None, ["start before step 2", "stop"]),  # the run ended inside the window
        (3, 10, None, ["start before step 3", "wait", "stop"]),  # resumed inside the window
        (4, 10, None, []),  # resumed at its end
        (0, 10, 3, ["start before step 2", "stop"]),  # an error inside the window
    ],
)
def test_the_trace_starts_and_stops_with_the_window(
    tmp_path, recorder, first, last, fail_at, calls
):
    profiler = profile.StepProfiler((2, 4), tmp_path / "profile")
    if fail_at is None:
        _loop(profiler, recorder, first, last)
    else:
        with pytest.raises(RuntimeError):
            _loop(profiler, recorder, first, last, fail_at)
    into = f" into {tmp_path / 'profile'}"
    assert recorder.calls == [c + into if c.startswith("start") else c for c in calls]


def test_no_window_traces_nothing(tmp_path, recorder):
    _loop(profile.StepProfiler((), tmp_path / "profile"), recorder, 0, 10)
    assert recorder.calls == [] and not (tmp_path / "profile").exists()


@pytest.mark.parametrize("off", [(), None, []])
def test_an_empty_window_is_off(off):
    assert TrainConfig(profile_steps=off).profile_steps == ()
    assert TrainConfig(profile_steps=[2, 4]).profile_steps == (2, 4)  # as config.json stores it


@pytest.mark.parametrize("window", [(4, 2), (3, 3), (-1, 2), (1, 2.5), (3,), (1, 2, 3), 5, "2,4"])
def test_a_bad_window_names_the_field(window):
    with pytest.raises(ValueError, match=re.escape(f"train.profile_steps={window!r} must be")):
        TrainConfig(profile_steps=window)


def test_a_window_after_the_last_step_is_refused():
    with pytest.raises(ValueError, match=re.escape("start < train.steps=10")):
        TrainConfig(steps=10, warmup_steps=0, profile_steps=(10, 12))
