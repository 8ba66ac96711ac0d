"""The HParams session file of a run directory, read back with TensorBoard's own event reader and
its HParams plugin's parsers."""

import time
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format
from tensorboard.backend.event_processing import plugin_event_accumulator
from tensorboard.plugins.hparams import api_pb2, metadata

from transformer_jax.run_dir import RunSummary
from transformer_jax.tracking import hparams as hparams_lib
from transformer_jax.train.logger import MetricsLogger


def load(run_path):
    """The run directory as TensorBoard's event accumulator loads it (every event file)."""
    accumulator = plugin_event_accumulator.EventAccumulator(str(run_path))
    accumulator.Reload()
    return accumulator


def plugin_content(accumulator, tag):
    return accumulator.SummaryMetadata(tag).plugin_data.content


def test_session_holds_hparams_metrics_and_status(tmp_path):
    hparams = {"variant": "none", "seed": 2, "tied": True, "splits": ("test", "test_long")}
    metrics = {"test/seq_accuracy": 0.875, "test/loss": 0.123456789}
    hparams_lib.write_session(
        tmp_path, hparams, start_time=100.0, status="diverged", step=40, metrics=metrics
    )
    accumulator = load(tmp_path)
    start = metadata.parse_session_start_info_plugin_data(
        plugin_content(accumulator, metadata.SESSION_START_INFO_TAG)
    )
    assert {k: json_format.MessageToDict(v) for k, v in start.hparams.items()} == {
        "variant": "none",
        "seed": "2",  # TensorBoard would print the number 2 as "2.0000"
        "tied": True,
        "splits": "('test', 'test_long')",
    }
    assert start.start_time_secs == 100.0
    assert start.group_name == ""  # no group given: a row of its own
    end = metadata.parse_session_end_info_plugin_data(
        plugin_content(accumulator, metadata.SESSION_END_INFO_TAG)
    )
    assert end.status == api_pb2.STATUS_FAILURE
    for tag, value in metrics.items():
        (event,) = accumulator.Tensors(tag)
        assert event.step == 40
        assert event.tensor_proto.float_val == [np.float32(value)]


def test_a_group_names_the_session_group(tmp_path):
    hparams_lib.write_session(tmp_path, {"variant": "none", "seed": 1}, group="scale/none")
    start = hparams_lib.read_session_start(tmp_path)
    assert start.group_name == "scale/none"


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [("seed", 0, "0"), ("seed", 12, "12"), ("seed", True, True), ("d_model", 64, 64)],
)
def test_the_seed_is_its_digits(name, value, expected):
    got = hparams_lib.session_value(name, value)
    assert got == expected and type(got) is type(expected)


def test_diagnostics_are_the_metrics_with_a_module_path():
    assert hparams_lib.is_diagnostic("test/attention_entropy/encoder/layer_0/self_attention")
    assert hparams_lib.is_diagnostic("test/ponder_mean/decoder")
    assert not hparams_lib.is_diagnostic("test/seq_accuracy")
    assert not hparams_lib.is_diagnostic("train/loss")


def test_experiment_keeps_the_columns_in_order(tmp_path):
    """The experiment summary lists the metrics in the order given (TensorBoard shows the first
    five) and each hparam's type and domain as the plugin would infer them from sessions."""
    metrics = ["test/seq_accuracy", "test/loss", "test/attention_entropy/encoder/layer_0"]
    hparams = {
        "variant": ["none", "sqrt_dk"],
        "seed": [2, 0, 1],
        "tied": [True, False],
        "lr": [0.001, 0.01],
        "mixed": [1, "a"],
        "fixed": [64, 64],
    }
    path = hparams_lib.write_experiment(tmp_path, hparams, metrics)
    assert hparams_lib.session_files(tmp_path) == [path]
    experiment = metadata.parse_experiment_plugin_data(
        plugin_content(load(tmp_path), metadata.EXPERIMENT_TAG)
    )
    assert [m.name.tag for m in experiment.metric_infos] == metrics
    infos = {h.name: json_format.MessageToDict(h) for h in experiment.hparam_infos}
    assert list(infos) == list(hparams)
    assert infos["variant"]["domainDiscrete"] == ["none", "sqrt_dk"]
    assert infos["seed"]["type"] == "DATA_TYPE_STRING"
    assert infos["seed"]["domainDiscrete"] == ["2", "0", "1"]
    assert infos["tied"]["type"] == "DATA_TYPE_BOOL"
    assert infos["lr"]["domainInterval"] == {"minValue": 0.001, "maxValue": 0.01}
    assert infos["mixed"]["domainDiscrete"] == ["1", "a"]
    assert infos["fixed"].get("differs", False) is False
    assert infos["variant"]["differs"] is True
    # Written again unchanged: the same file.
    assert hparams_lib.write_experiment(tmp_path, hparams, metrics) == path


def test_rewriting_replaces_the_one_session(tmp_path):
    """A resumed run or a rebuilt report writes the session again: still one file, the new
    content, named after every event file of the directory (TensorBoard reads them in name
    order)."""
    later = int(time.time()) + 100  # the logger's file, stamped by a clock ahead of this one
    (tmp_path / f"events.out.tfevents.{later}.host.abc").write_bytes(b"")
    first = hparams_lib.write_session(tmp_path, {"seed": 0}, start_time=5.0)
    second = hparams_lib.write_session(tmp_path, {"seed": 0}, start_time=5.0, status="finished")
    assert hparams_lib.session_files(tmp_path) == [second]
    assert first != second and first < second
    assert sorted(p.name for p in tmp_path.iterdir())[-1] == second.rsplit("/", 1)[1]
    assert hparams_lib.read_session_start(tmp_path).start_time_secs == 5.0
    end = metadata.parse_session_end_info_plugin_data(
        plugin_content(load(tmp_path), metadata.SESSION_END_INFO_TAG)
    )
    assert end.status == api_pb2.STATUS_SUCCESS


def test_an_unchanged_session_is_left_as_it_is(tmp_path):
    """A sweep rerun writes every finished run's session again: the same content (written at
    another time) keeps its file, so committed results do not change; new content, or a logger
    file named after the session, still replaces it."""

    def write(**kwargs):
        return hparams_lib.write_session(
            tmp_path, {"seed": 0}, start_time=5.0, step=40, metrics={"test/loss": 0.5}, **kwargs
        )

    first = write(status="finished")
    content = Path(first).read_bytes()
    assert write(status="finished") == first
    assert Path(first).read_bytes() == content
    failed = write(status="failed")
    assert failed != first and hparams_lib.session_files(tmp_path) == [failed]
    (tmp_path / f"events.out.tfevents.{int(time.time()) + 100}.host.abc").write_bytes(b"")
    assert write(status="failed") != failed


def test_no_session_reads_as_none(tmp_path):
    assert hparams_lib.read_session_start(tmp_path) is None
    assert hparams_lib.session_files(tmp_path) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (3, 3), (0.5, 0.5), ("none", "none"), ([1, 2], "(1, 2)"), (None, "None")],
)
def test_hparam_values(value, expected):
    assert hparams_lib.hparam_value(value) == expected


def test_flat_metrics_are_the_logged_tags():
    summary = {"test": {"loss": 1.0, "seq_accuracy": 0.5}, "test_long": {"loss": 2.0}}
    assert hparams_lib.flat_metrics(summary) == {
        "test/loss": 1.0,
        "test/seq_accuracy": 0.5,
        "test_long/loss": 2.0,
    }


def test_only_the_process_that_writes_the_run_has_a_session(tmp_path):
    """Every process of a multi-process run logs; process 0 alone (writes=True) writes files,
    the HParams session among them."""
    config = {"seed": 3, "train": {"wandb_project": ""}}
    for writes, run in ((False, tmp_path / "other"), (True, tmp_path / "zero")):
        run.mkdir()
        with MetricsLogger(run, total_steps=2, writes=writes, config=config) as logger:
            logger.write(2, "test", {"loss": 0.5})
            logger.write_summary(
                RunSummary(status="finished", step=2, metrics={"test": {"loss": 0.5}})
            )
    assert list((tmp_path / "other").iterdir()) == []
    start = hparams_lib.read_session_start(tmp_path / "zero")
    assert {k: json_format.MessageToDict(v) for k, v in start.hparams.items()} == {"seed": "3"}
    assert len(hparams_lib.session_files(tmp_path / "zero")) == 1
