"""metrics.jsonl contents, resume truncation, TensorBoard events and the console line."""

import errno
import glob
import io
import json
import os
import struct
import threading
import types

import jax.numpy as jnp
import numpy as np
import pytest
from tensorboardX import event_file_writer, record_writer
from tensorboardX.proto import event_pb2

from transformer_jax.run_dir import METRICS_FILE
from transformer_jax.train.logger import MetricsLogger, StepClock


def _read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def _without_time(records):
    return [{k: v for k, v in r.items() if k != "time"} for r in records]


def _read_events(workdir):
    """All events from the TFRecord event files (no tensorboard install needed)."""
    events = []
    for path in sorted(glob.glob(os.path.join(workdir, "events.out.tfevents.*"))):
        with open(path, "rb") as f:
            data = f.read()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            events.append(event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length]))
            offset += 12 + length + 4  # length, its crc, payload, payload crc
    return events


def _read_scalars(workdir):
    """{(tag, step): value} over all event files."""
    return {
        (value.tag, event.step): value.simple_value
        for event in _read_events(workdir)
        for value in event.summary.value
    }


def _log_run(workdir, steps, stream=None):
    with MetricsLogger(workdir, total_steps=30, stream=stream or io.StringIO()) as logger:
        for step in steps:
            logger.write(step, "train", {"loss": np.float32(1.0 / step), "grad_norm": jnp.ones(())})
            if step % 20 == 0:
                logger.write(step, "test", {"loss": 0.5, "seq_accuracy": jnp.float32(0.25)})


def test_jsonl_records_are_plain_floats_with_time(tmp_path):
    _log_run(tmp_path, [10, 20])
    records = _read_jsonl(tmp_path / METRICS_FILE)
    assert _without_time(records) == [
        {"step": 10, "split": "train", "loss": pytest.approx(0.1), "grad_norm": 1.0},
        {"step": 20, "split": "train", "loss": pytest.approx(0.05), "grad_norm": 1.0},
        {"step": 20, "split": "test", "loss": 0.5, "seq_accuracy": 0.25},
    ]
    times = [r["time"] for r in records]
    assert times == sorted(times) and times[0] >= 0


def test_resume_truncation_matches_uninterrupted_run(tmp_path):
    uninterrupted, crashed = tmp_path / "a", tmp_path / "b"
    _log_run(uninterrupted, [10, 20, 30])
    _log_run(crashed, [10, 20, 30])  # crashed after step 30, last checkpoint at step 20
    with open(crashed / METRICS_FILE, "a") as f:
        f.write('{"step": 40, "split": "tr')  # a line cut short by the crash
    with MetricsLogger(crashed, total_steps=30, stream=io.StringIO()) as logger:
        assert logger.truncate_after(20) == 2
        logger.write(30, "train", {"loss": np.float32(1.0 / 30), "grad_norm": 1.0})
    resumed = _read_jsonl(crashed / METRICS_FILE)
    assert _without_time(resumed) == _without_time(_read_jsonl(uninterrupted / METRICS_FILE))
    assert resumed[-1]["time"] >= resumed[-2]["time"]  # time continues, not from 0
    # TensorBoard is told to hide the crashed run's events from step 21 on.
    purges = [
        e.step
        for e in _read_events(str(crashed))
        if e.session_log.status == event_pb2.SessionLog.START
    ]
    assert purges == [21]
    assert _read_scalars(str(crashed))[("train/loss", 30)] == pytest.approx(1 / 30)


def test_tensorboard_scalars_are_written(tmp_path):
    _log_run(tmp_path, [10, 20])
    scalars = _read_scalars(str(tmp_path))
    assert scalars[("train/loss", 10)] == pytest.approx(0.1)
    assert scalars[("train/grad_norm", 20)] == 1.0
    assert scalars[("test/seq_accuracy", 20)] == 0.25


def test_plain_console_lines_are_periodic(tmp_path):
    stream = io.StringIO()
    with MetricsLogger(tmp_path, total_steps=30, stream=stream, console_every_s=3600) as logger:
        for step in (10, 20, 30):
            logger.write(step, "train", {"loss": 2.0})
        logger.write(30, "test", {"loss": 1.5, "attention_entropy/layer_0": 0.1})
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert lines[0].startswith("step 10/30 (33%)") and "loss 2.0000" in lines[0]
    assert lines[1].startswith("step 30/30 (100%)") and "steps/s" in lines[1]
    assert "ETA 0:00:00" in lines[1]
    assert lines[2] == "step 30 test: loss=1.5"  # per-layer diagnostics stay off the console
    assert len(lines) == 3


def test_a_labelled_logger_starts_every_console_line_with_its_label(tmp_path):
    stream = io.StringIO()
    with MetricsLogger(tmp_path, total_steps=30, stream=stream, label="seed_3") as logger:
        logger.write(30, "train", {"loss": 2.0})
        logger.write(30, "test", {"loss": 1.5})
    assert stream.getvalue().splitlines() == [
        "seed_3 | step 30/30 (100%) | loss 2.0000",
        "seed_3 | step 30 test: loss=1.5",
    ]


def test_the_runs_of_a_group_report_the_groups_steps_per_second(tmp_path, monkeypatch):
    # One program trains both runs, 10 steps in 2 s; the second run's logger writes step 10 at
    # 1.5 s and step 20 at 4.5 s: its own gaps (10 steps in 3 s) are not the group's speed.
    now = [0.0]
    monkeypatch.setattr(
        "transformer_jax.train.logger.time", types.SimpleNamespace(monotonic=lambda: now[0])
    )
    clock, streams = StepClock(), [io.StringIO(), io.StringIO()]
    loggers = [
        MetricsLogger(tmp_path / f"seed_{i}", total_steps=20, stream=streams[i], clock=clock)
        for i in range(2)
    ]
    for step, times in ((10, (0.0, 1.5)), (20, (2.0, 4.5))):
        for logger, at in zip(loggers, times, strict=True):
            now[0] = at
            logger.write(step, "train", {"loss": 2.0})
    for logger in loggers:
        logger.close()
    for stream in streams:
        assert "| 5.00 steps/s |" in stream.getvalue().splitlines()[-1]
    alone = io.StringIO()  # without the shared clock: its own gaps
    with MetricsLogger(tmp_path / "alone", total_steps=20, stream=alone) as logger:
        for step, at in ((10, 1.5), (20, 4.5)):
            now[0] = at
            logger.write(step, "train", {"loss": 2.0})
    assert "| 3.33 steps/s |" in alone.getvalue().splitlines()[-1]


class _FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_tty_console_redraws_in_place(tmp_path):
    stream = _FakeTTY()
    with MetricsLogger(tmp_path, total_steps=30, stream=stream) as logger:
        for step in (10, 20):
            logger.write(step, "train", {"loss": 2.0})
        logger.write(20, "test", {"loss": 1.5})
    text = stream.getvalue()
    assert text.count("\r") == 2 and "ETA" in text
    assert text.endswith("\nstep 20 test: loss=1.5\n")


@pytest.mark.parametrize(
    ("metrics", "message"),
    [({"step": 1.0}, "reserved"), ({"loss": np.ones(3)}, "'loss'.*scalar"), ({"x": "a"}, "'x'")],
)
def test_bad_metrics_raise(tmp_path, metrics, message):
    with (
        MetricsLogger(tmp_path, total_steps=1, stream=io.StringIO()) as logger,
        pytest.raises(ValueError, match=message),
    ):
        logger.write(1, "train", metrics)


def test_a_logger_that_does_not_write_leaves_files_and_console_alone(tmp_path):
    """Every process but the first of a multi-process run: process 0's metrics.jsonl is neither
    read (it may be rewriting it) nor appended to, and no events file or console line appears."""
    (tmp_path / METRICS_FILE).write_text('{"step": 20, "split": "train", "loss": 1.0}\n')
    stream = io.StringIO()
    with MetricsLogger(tmp_path, total_steps=10, stream=stream, writes=False) as logger:
        assert logger.truncate_after(0) == 0
        logger.write(1, "train", {"loss": 2.0})
        logger.write(1, "test", {"loss": 3.0})
    assert sorted(os.listdir(tmp_path)) == [METRICS_FILE]
    assert (tmp_path / METRICS_FILE).read_text() == '{"step": 20, "split": "train", "loss": 1.0}\n'
    assert stream.getvalue() == ""


def test_a_failing_event_writer_neither_hangs_nor_outlives_the_run(tmp_path, monkeypatch):
    """A full disk under TensorBoard's writer thread (a fault-injecting writer: every write of
    tensorboardX's thread fails with ENOSPC, and the thread dies of it): the run's next writes
    raise one error naming the events file instead of blocking on the thread's full queue, or
    (when the thread fails after the last write) `close` does. The wait is only against a
    hang."""

    write = record_writer.RecordWriter.write

    def disk_full(self, data):
        if isinstance(threading.current_thread(), event_file_writer._EventLoggerThread):
            raise OSError(errno.ENOSPC, "No space left on device")
        write(self, data)

    monkeypatch.setattr(record_writer.RecordWriter, "write", disk_full)
    raised = []

    def log_many_steps():
        logger = MetricsLogger(tmp_path, total_steps=500, stream=io.StringIO())
        try:
            for step in range(1, 500):  # 10 events fill tensorboardX's queue
                logger.write(step, "train", {"loss": 1.0, "grad_norm": 2.0})
        except OSError as error:
            raised.append(error)
        try:
            logger.close()
        except OSError as error:
            raised.append(error)

    worker = threading.Thread(target=log_many_steps, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "the logger hangs on tensorboardX's queue"
    assert raised and all(error is raised[0] for error in raised), raised
    assert raised[0].errno == errno.ENOSPC
    (events,) = glob.glob(str(tmp_path / "events.out.tfevents.*"))
    assert str(raised[0]).startswith(f"TensorBoard events file {events} could not be written")
    assert "No space left on device" in str(raised[0])


def test_a_metrics_line_that_cannot_be_written_names_the_file(tmp_path, monkeypatch):
    """A full disk under metrics.jsonl (a fault-injecting file: its flush fails with ENOSPC, as
    a real write's OSError, without a file name)."""
    logger = MetricsLogger(tmp_path, total_steps=10, stream=io.StringIO())
    logger.write(1, "train", {"loss": 1.0})

    def disk_full():
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(logger._file, "flush", disk_full)
    with pytest.raises(OSError, match=f"No space left on device: '{tmp_path / METRICS_FILE}'"):
        logger.write(2, "train", {"loss": 1.0})
    monkeypatch.undo()
    logger.close()
