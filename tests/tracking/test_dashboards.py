"""A tiny sweep (2 variants x 2 seeds, trained as seed groups, one variant resumed, attention
diagnostics on) read back through the real tools: TensorBoard servers' HParams API, and wandb's
reader of its offline run files. One trained sweep serves every test here."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format
from optional_packages import require
from tracking_fixtures import TensorBoard, make_project, train_tiny_sweep

from transformer_jax.report.report import RUNS_CSV, write_report
from transformer_jax.run_dir import HPARAMS_FILE, WANDB_FILE, read_json
from transformer_jax.sweep_dir import SWEEP_FILE
from transformer_jax.tracking import hparams as hparams_lib

VARIANTS, SEEDS = ("full", "half"), (0, 1)
RUNS = [f"{v}/seed_{s}" for v in VARIANTS for s in SEEDS]
COPIES = ("trained", "sweep", "rebuilt")


def import_wandb():
    """wandb, or a skip; under CI (CI=true) a missing wandb is a failure."""
    return require("wandb", "wandb", "requirements-wandb.txt")


def has_wandb() -> bool:
    try:
        import wandb  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """trained/: the sweep as its runs left it (the runner's experiment, the trainer's
    sessions); sweep/: a copy of it after its report; rebuilt/: only the report's sweep.json and
    runs.csv, rebuilt with --runs_csv. Three sweeps of their own names (their session groups)."""
    root = tmp_path_factory.mktemp("dashboards")
    project = make_project(root / "project")
    logdir = root / "logdir"
    trained, sweep = logdir / "trained", logdir / "sweep"
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(root / "wandb")}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        wandb_project = "tiny" if has_wandb() else ""
        train_tiny_sweep(project, trained, wandb_project=wandb_project, diagnostics=True)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    shutil.copytree(trained, sweep, ignore=shutil.ignore_patterns("checkpoints"))
    write_report(str(sweep))
    rebuilt = logdir / "rebuilt"
    rebuilt.mkdir()
    for name in (SWEEP_FILE, RUNS_CSV):
        shutil.copy(sweep / name, rebuilt / name)
    write_report(str(rebuilt), runs_csv=str(rebuilt / RUNS_CSV))
    return {"root": root, "logdir": logdir, "sweep": sweep, "rebuilt": rebuilt}


@pytest.fixture(scope="module")
def tensorboard(dirs):
    """copy -> (experiment, session groups) of a real TensorBoard server over that copy alone,
    as `tensorboard --logdir <sweep>` starts it; "all" over the three at once."""
    logdir = dirs["logdir"]
    servers = {copy: TensorBoard(logdir / copy) for copy in COPIES}
    servers["all"] = TensorBoard(logdir)
    try:
        expected = {copy: len(RUNS) for copy in COPIES} | {"all": len(COPIES) * len(RUNS)}
        yield {copy: server.sessions(expected[copy]) for copy, server in servers.items()}
    finally:
        for server in servers.values():
            server.close()


def sessions_of(groups) -> dict[str, dict]:
    """Session name -> the session, with its group's name and hparams."""
    out = {}
    for group in groups:
        for session in group["sessions"]:
            assert session["name"] not in out, f"two sessions for {session['name']}"
            out[session["name"]] = {**session, "group": group["name"], "hparams": group["hparams"]}
    return out


def float32(value: float) -> float:
    """TensorBoard stores scalars as float32."""
    return float(np.float32(value))


def metric_tags(experiment: dict) -> list[str]:
    return [m["name"]["tag"] for m in experiment["metricInfos"]]


def values_of(item: dict) -> dict[str, dict]:
    """tag -> metric value of a session or a session group."""
    return {m["name"]["tag"]: m for m in item["metricValues"] if not m["name"]["group"]}


def check_metrics(session: dict, metrics: dict[str, float], step: int) -> None:
    values = values_of(session)
    for tag, expected in metrics.items():
        assert values[tag]["value"] == float32(expected), (session["name"], tag)
        assert values[tag]["trainingStep"] == step


def hparams_of(variant: str) -> dict:
    """A variant's hparams as its session group shows them: its first seed's."""
    return {
        "variant": variant,
        "seed": "0",
        "data_size": variant,
        "data.num_train": {"full": 64, "half": 32}[variant],
    }


@pytest.mark.parametrize("copy", COPIES)
def test_one_session_per_run_with_hparams_and_final_metrics(dirs, tensorboard, copy):
    """The runner's and trainer's sessions (trained/), the report's rewrite of them (sweep/) and
    its rebuild from runs.csv (rebuilt/): four sessions, one per run, the resumed seeds
    included, each with its variant, seed, cell factor and overridden field, ended with its
    summary.json's status and the final value of every metric the table lists."""
    experiment, groups = tensorboard[copy]
    sessions = sessions_of(groups)
    assert sorted(sessions) == RUNS
    for name, session in sessions.items():
        variant, seed = name.split("/seed_")
        summary = read_json(dirs["sweep"] / name / "summary.json")
        assert session["hparams"] == hparams_of(variant)
        start = hparams_lib.read_session_start(dirs["logdir"] / copy / name)
        assert json_format.MessageToDict(start.hparams["seed"]) == seed  # its own seed
        assert session["status"] == "STATUS_SUCCESS"
        assert summary["step"] == 4
        final = hparams_lib.flat_metrics(summary["metrics"])
        check_metrics(session, {t: final[t] for t in metric_tags(experiment) if t in final}, 4)
        # One session file; the resumed runs' too (their first process wrote one as well).
        assert len(hparams_lib.session_files(dirs["logdir"] / copy / name)) == 1


@pytest.mark.parametrize("copy", COPIES)
def test_the_seeds_of_a_variant_are_one_group_averaged(tensorboard, copy):
    """One row per variant, named as its W&B group (<sweep>/<variant>), holding its seeds'
    sessions; its metrics the mean of theirs (TensorBoard's default aggregation)."""
    experiment, groups = tensorboard[copy]
    assert sorted(g["name"] for g in groups) == [f"{copy}/{v}" for v in VARIANTS]
    for group in groups:
        variant = group["name"].rpartition("/")[2]
        assert [s["name"] for s in group["sessions"]] == [f"{variant}/seed_{s}" for s in SEEDS]
        assert group["hparams"] == hparams_of(variant)
        averaged = values_of(group)
        for tag in metric_tags(experiment):
            seeds = [values_of(s)[tag]["value"] for s in group["sessions"]]
            assert averaged[tag]["value"] == pytest.approx(np.mean(seeds), rel=1e-6), tag


def test_a_logdir_of_several_sweeps_keeps_their_groups_apart(tensorboard):
    _, groups = tensorboard["all"]
    assert sorted(g["name"] for g in groups) == sorted(f"{c}/{v}" for c in COPIES for v in VARIANTS)
    names = sorted(sessions_of(groups))
    assert names == sorted(f"{c}/{run}" for c in COPIES for run in RUNS)


def test_resumed_session_keeps_its_start(dirs):
    """A resumed run's session starts when its first process did: before the resume's
    config.json record, and the same in the trainer's and the report's session."""
    for name in ("full/seed_0", "full/seed_1"):
        config = read_json(dirs["sweep"] / name / "config.json")
        assert [r["changes"] for r in config["resumes"]] == [{"train.steps": {"from": 2, "to": 4}}]
        trained = hparams_lib.read_session_start(dirs["logdir"] / "trained" / name)
        reported = hparams_lib.read_session_start(dirs["sweep"] / name)
        assert trained.start_time_secs == reported.start_time_secs
        metrics = (dirs["sweep"] / name / "metrics.jsonl").read_text().splitlines()
        assert json.loads(metrics[0])["step"] == 2  # the first process logged step 2


@pytest.mark.parametrize("copy", COPIES)
def test_experiment_opens_on_the_sweeps_metrics(dirs, tensorboard, copy):
    """The table's metric columns: the sweep's declared metrics first, in their order (the five
    TensorBoard ticks at first); after the report every other metric the runs logged, the
    attention diagnostics last. The seed is text, its digits."""
    experiment, _ = tensorboard[copy]
    hparams = {h["name"]: h for h in experiment["hparamInfos"]}
    assert set(hparams) == {"variant", "seed", "data_size", "data.num_train"}
    assert sorted(hparams["variant"]["domainDiscrete"]) == list(VARIANTS)
    assert hparams["seed"]["type"] == "DATA_TYPE_STRING"
    assert hparams["seed"]["domainDiscrete"] == ["0", "1"]
    assert hparams["data.num_train"]["domainInterval"] == {"minValue": 32.0, "maxValue": 64.0}
    tags = metric_tags(experiment)
    declared = ["test/seq_accuracy", "test/loss"]
    assert tags[:2] == declared
    if copy != "sweep":  # the runner's at launch; runs.csv keeps the declared metrics alone
        assert tags == declared
        return
    logged = set()
    for run in RUNS:
        summary = read_json(dirs["sweep"] / run / "summary.json")
        logged |= set(hparams_lib.flat_metrics(summary["metrics"]))
        for line in (dirs["sweep"] / run / "metrics.jsonl").read_text().splitlines():
            event = json.loads(line)
            logged |= {f"{event['split']}/{k}" for k in event if k not in ("step", "split", "time")}
    assert set(tags) == logged
    rest = tags[2:]
    diagnostics = [t for t in rest if "/attention_" in t]
    assert diagnostics, "train.diagnostics logged no attention statistics"
    plain = [t for t in rest if t not in diagnostics]
    assert {"test/token_accuracy", "test_long/token_accuracy", "train/loss"} <= set(plain)
    assert rest == sorted(plain) + sorted(diagnostics)


def test_report_only_from_runs_csv_gives_the_same_sessions(dirs, tensorboard):
    """--report_only --runs_csv (a committed sweep without run directories): one session per
    run with the same hparams, and runs.csv's metrics, which are summary.json's."""
    rebuilt = sessions_of(tensorboard["rebuilt"][1])
    reported = sessions_of(tensorboard["sweep"][1])
    assert sorted(rebuilt) == RUNS
    for name, session in rebuilt.items():
        assert session["hparams"] == reported[name]["hparams"]
        assert session["status"] == "STATUS_SUCCESS"
        summary = read_json(dirs["sweep"] / name / "summary.json")
        listed = {f"test/{k}": summary["metrics"]["test"][k] for k in ("seq_accuracy", "loss")}
        check_metrics(session, listed, 4)
        stored = read_json(dirs["rebuilt"] / name / HPARAMS_FILE)
        assert stored["hparams"] == read_json(dirs["sweep"] / name / HPARAMS_FILE)["hparams"]
        assert stored["sweep"] == "rebuilt"


def test_rebuilding_a_report_keeps_one_session(dirs):
    before = hparams_lib.read_session_start(dirs["sweep"] / "half/seed_0")
    write_report(str(dirs["sweep"]))
    assert len(hparams_lib.session_files(dirs["sweep"] / "half/seed_0")) == 1
    after = hparams_lib.read_session_start(dirs["sweep"] / "half/seed_0")
    assert after == before
    assert len(hparams_lib.session_files(dirs["sweep"])) == 1  # the experiment


# --- Weights & Biases, offline. ---


def offline_runs(run_path: Path) -> list[Path]:
    """The W&B offline run directories of a run directory, oldest first."""
    return sorted((run_path / "wandb").glob("offline-run-*"))


def read_records(offline: Path) -> list[dict]:
    """The records of an offline run's .wandb file, read by wandb's own reader
    (`wandb leet inspect --json`: one JSON object per record)."""
    import_wandb()
    (path,) = offline.glob("run-*.wandb")
    command = [sys.executable, "-m", "wandb", "leet", "inspect", str(path), "--json"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def of_type(records: list[dict], kind: str) -> list[dict]:
    return [record[kind] for record in records if record["type"] == kind]


def history(records) -> list[dict]:
    return [row["item"] for row in of_type(records, "history")]


def summary_of(records) -> dict:
    out = {}
    for summary in of_type(records, "summary"):
        out.update(summary.get("update", {}))
    return out


def run_record(records) -> dict:
    (run,) = of_type(records, "run")
    return run


def test_wandb_offline_run_has_config_metrics_and_summary(dirs):
    import_wandb()
    run_path = dirs["sweep"] / "half/seed_1"
    (offline,) = offline_runs(run_path)
    records = read_records(offline)
    run = run_record(records)
    assert run["run_id"] == read_json(run_path / WANDB_FILE)["id"]
    assert run["project"] == "tiny"
    assert run["run_group"] == "trained/half"  # the sweep it was trained in
    assert run["display_name"] == "half/seed_1"
    config = run["config"]["update"]
    stored = read_json(run_path / "config.json")
    assert config["seed"] == 1 and config["data"]["num_train"] == 32
    assert config["model"] == stored["model"] and config["train"] == stored["train"]
    rows = history(records)
    logged = [json.loads(line) for line in (run_path / "metrics.jsonl").read_text().splitlines()]
    train_lines = [line for line in logged if line["split"] == "train"]
    train_rows = [row for row in rows if "train/loss" in row]
    assert [row["_step"] for row in train_rows] == [line["step"] for line in train_lines]
    assert [row["train/loss"] for row in train_rows] == [line["loss"] for line in train_lines]
    summary = read_json(run_path / "summary.json")
    got = summary_of(records)
    assert got["status"] == "finished" and got["step"] == summary["step"]
    for split, values in summary["metrics"].items():
        for name, value in values.items():
            assert math.isclose(got[f"{split}/{name}"], value, rel_tol=0, abs_tol=0)


def test_wandb_resume_continues_the_same_run(dirs):
    """The resumed seeds continue their W&B run: a second offline run of the same id that
    logs the steps after the checkpoint and ends with the final summary."""
    import_wandb()
    for seed in SEEDS:
        run_path = dirs["sweep"] / f"full/seed_{seed}"
        first, second = offline_runs(run_path)
        first_records, second_records = read_records(first), read_records(second)
        run_id = read_json(run_path / WANDB_FILE)["id"]
        ids = {run_record(first_records)["run_id"], run_record(second_records)["run_id"]}
        assert ids == {run_id}
        assert [r["_step"] for r in history(first_records) if "train/loss" in r] == [2]
        assert [r["_step"] for r in history(second_records) if "train/loss" in r] == [4]
        assert summary_of(second_records)["step"] == 4
        assert run_record(second_records)["config"]["update"]["train"]["steps"] == 4


def test_no_wandb_import_when_off(tmp_path):
    """Without train.wandb_project a run never imports wandb."""
    code = (
        "import sys\n"
        "from transformer_jax.train.logger import MetricsLogger\n"
        "from transformer_jax.run_dir import RunSummary\n"
        f"logger = MetricsLogger({str(tmp_path)!r}, total_steps=1,"
        " config={'seed': 0, 'train': {'wandb_project': ''}})\n"
        "logger.write(1, 'train', {'loss': 1.0})\n"
        "logger.write_summary(RunSummary(status='finished', step=1))\n"
        "logger.close()\n"
        "assert 'wandb' not in sys.modules, 'wandb was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(hparams_lib.session_files(tmp_path)) == 1


def test_a_wandb_that_cannot_start_is_one_error_before_training(tmp_path):
    """Online without an account: the logger refuses when it opens (before anything compiles)
    with a ValueError naming the field and the ways out, which main prints as one line."""
    import_wandb()
    code = (
        "from transformer_jax.train.logger import MetricsLogger\n"
        "try:\n"
        f"    MetricsLogger({str(tmp_path / 'run')!r}, total_steps=1,"
        " config={'seed': 0, 'train': {'wandb_project': 'tiny'}})\n"
        "except ValueError as error:\n"
        "    print(error)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), WANDB_MODE="online", WANDB_CONFIG_DIR=str(tmp_path / "cfg"))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("train.wandb_project='tiny': W&B could not start ("), (
        result.stdout
    )
    assert "WANDB_MODE=offline" in result.stdout
