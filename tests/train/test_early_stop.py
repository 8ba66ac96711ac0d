"""train.early_stop_*: the criterion on its own, and in the training loop with resuming."""

import json

import pytest
from train_fixtures import read_metrics, tiny_config

from transformer_jax.config import TrainConfig
from transformer_jax.train.early_stop import EarlyStopping
from transformer_jax.train.trainer import train_and_evaluate


def _evals(tracker, values, split="test", name="seq_accuracy"):
    return [tracker.update(10 * (i + 1), {split: {name: v}}) for i, v in enumerate(values)]


def test_stops_after_patience_evaluations_without_an_improvement_above_min_delta():
    tracker = EarlyStopping("test/seq_accuracy", patience=2, min_delta=0.01)
    # 0.605 is not better than 0.6 by more than 0.01: it counts as stale.
    assert _evals(tracker, [0.5, 0.6, 0.605, 0.7, 0.7, 0.705]) == [False] * 5 + [True]
    summary = tracker.summary()
    assert (summary["best"], summary["best_step"], summary["stopped_step"]) == (0.7, 40, 60)
    assert "did not improve by more than 0.01 in 2 evaluations" in summary["reason"]


def test_no_stop_before_min_steps():
    tracker = EarlyStopping("test/seq_accuracy", patience=1, min_delta=0.0, min_steps=40)
    # Zero accuracy at first is not a plateau: the stop waits for step 40.
    assert _evals(tracker, [0.0, 0.0, 0.0, 0.0]) == [False, False, False, True]


def test_losses_must_fall():
    tracker = EarlyStopping("test/loss", patience=1, min_delta=0.0)
    assert _evals(tracker, [2.0, 1.0, 1.5], name="loss") == [False, False, True]
    assert tracker.best == 1.0


def test_a_metric_the_evaluation_lacks_raises_with_the_valid_names():
    tracker = EarlyStopping("test/bleu", patience=1, min_delta=0.0)
    with pytest.raises(ValueError, match=r"no metric 'bleu' on split 'test'; valid: \['loss'\]"):
        tracker.update(10, {"test": {"loss": 1.0}})


def test_resumes_the_history_of_its_metric_under_a_changed_criterion():
    tracker = EarlyStopping("test/loss", patience=3, min_delta=0.0)
    _evals(tracker, [2.0, 2.5], name="loss")
    criterion = {"metric": "test/loss", "patience": 3, "min_delta": 0.0, "min_steps": 0}
    resumed = EarlyStopping.from_state(tracker.summary(), **criterion)
    assert (resumed.best, resumed.best_step, resumed.stale) == (2.0, 10, 1)
    longer = EarlyStopping.from_state(tracker.summary(), **{**criterion, "patience": 4})
    assert (longer.best, longer.best_step, longer.stale) == (2.0, 10, 1)
    other = EarlyStopping.from_state(tracker.summary(), **{**criterion, "metric": "test/x"})
    assert (other.best, other.stale) == (None, 0)


def test_a_recorded_stop_holds_only_if_the_new_patience_would_stop_too():
    tracker = EarlyStopping("test/loss", patience=1, min_delta=0.0)
    assert _evals(tracker, [2.0, 2.5], name="loss") == [False, True]
    criterion = {"metric": "test/loss", "patience": 1, "min_delta": 0.0, "min_steps": 0}
    assert EarlyStopping.from_state(tracker.summary(), **criterion).stopped_step == 20
    patient = EarlyStopping.from_state(tracker.summary(), **{**criterion, "patience": 3})
    assert not patient.stopped and patient.stale == 1


@pytest.mark.parametrize("metric", ["test", "/loss", "test/", 3])
def test_config_rejects_malformed_metrics(metric):
    with pytest.raises(ValueError, match=r"train.early_stop_metric=.* must be '' \(off\) or"):
        TrainConfig(early_stop_metric=metric)


def test_the_run_stops_records_why_and_a_resume_trains_no_further(tmp_path):
    # min_delta no accuracy can beat: the first evaluation is the best, the second stops.
    config = tiny_config(
        tmp_path / "tfds",
        steps_=60,
        log_every=10,
        eval_every=10,
        checkpoint_every=10,
        generate_eval=False,
        diagnostics=False,
        early_stop_metric="test/token_accuracy",
        early_stop_patience=1,
        early_stop_min_delta=2.0,
    )
    workdir = tmp_path / "run"
    summary = train_and_evaluate(config, str(workdir))
    assert summary.status == "finished" and summary.step == 20
    on_disk = json.loads((workdir / "summary.json").read_text())["early_stop"]
    assert on_disk["stopped_step"] == 20 and on_disk["best_step"] == 10
    assert "test/token_accuracy did not improve" in on_disk["reason"]
    lines = read_metrics(workdir)
    assert max(m["step"] for m in lines if m["split"] == "train") == 20

    again = train_and_evaluate(config, str(workdir))
    assert again.step == 20 and again.early_stop["stopped_step"] == 20
    assert [m for m in read_metrics(workdir) if m["split"] == "train"] == [
        m for m in lines if m["split"] == "train"
    ]


def test_a_resume_with_a_longer_patience_keeps_the_history(tmp_path):
    """The first process trains 20 steps (best at 10, one stale evaluation); resumed with
    patience 5 and more steps, the run still counts from the best at step 10 and stops at 60,
    not 5 evaluations after the resume."""
    criterion = {"early_stop_metric": "test/token_accuracy", "early_stop_min_delta": 2.0}
    cadence = {"log_every": 10, "eval_every": 10, "checkpoint_every": 10}
    first = tiny_config(
        tmp_path / "tfds",
        steps_=20,
        generate_eval=False,
        diagnostics=False,
        early_stop_patience=3,
        **criterion,
        **cadence,
    )
    workdir = tmp_path / "run"
    assert train_and_evaluate(first, str(workdir)).step == 20
    resumed = first.copy_and_resolve_references()
    resumed.train.update(steps=100, early_stop_patience=5)
    summary = train_and_evaluate(resumed, str(workdir))
    assert (summary.step, summary.early_stop["best_step"]) == (60, 10)
    assert summary.early_stop["stopped_step"] == 60


def test_an_early_stop_split_the_data_lacks_fails_before_training(tmp_path):
    config = tiny_config(tmp_path / "tfds", early_stop_metric="validation/loss")
    with pytest.raises(ValueError, match=r"reads split 'validation'.*valid splits: \['test'"):
        train_and_evaluate(config, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_an_early_stop_metric_no_evaluator_logs_fails_before_training(tmp_path):
    """One line naming the field, the value and the metrics the run's evaluators log there."""
    config = tiny_config(tmp_path / "tfds", early_stop_metric="test/bleu")
    message = (
        r"^train.early_stop_metric='test/bleu': no evaluator of the run logs 'bleu'; the metrics "
        r"logged on test: \['test/gen_seq_accuracy', 'test/loss', 'test/token_accuracy', "
        r"'test/seq_accuracy', 'test/\*/\*', 'test/mean_loss'\]$"
    )
    with pytest.raises(ValueError, match=message):
        train_and_evaluate(config, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "metric, blocks, logged",
    [
        ("test/mean_loss", {}, True),  # a curve metric of the loss
        ("test/steps_to_threshold", {}, False),  # only with train.loss_threshold > 0
        ("test/gen_seq_accuracy", {"generation": {"enabled": False}}, False),
        ("test/greedy_gen_seq_accuracy", {"generation": {"prefix": "greedy_"}}, True),
        ("test/gen_seq_accuracy", {"generation": {"prefix": "greedy_"}}, False),
        ("test/bleu", {"bleu": {"enabled": True}}, True),  # BLEU names its own: not declared
        # train.diagnostics (the tiny run's): the statistics of each attention layer
        ("test/attention_entropy/encoder/layer_0/self_attention", {}, True),
    ],
)
def test_the_metrics_checked_are_those_the_blocks_log(tmp_path, metric, blocks, logged):
    from transformer_jax import data
    from transformer_jax.config import TrainConfig
    from transformer_jax.train import evaluators
    from transformer_jax.train.trainer import resolve_model_config

    config = tiny_config(tmp_path / "tfds")
    train = config.train.to_dict()
    for name, block in blocks.items():
        train["evaluators"][name].update(block)
    train_cfg = evaluators.check_blocks(
        TrainConfig.from_dict({**train, "early_stop_metric": metric})
    )
    info = data.describe_dataset(config.data, build=False)
    model_config = resolve_model_config(config, info)
    if logged:
        evaluators.check_early_stop(train_cfg, info, model_config)
    else:
        with pytest.raises(ValueError, match=r"no evaluator of the run logs"):
            evaluators.check_early_stop(train_cfg, info, model_config)
