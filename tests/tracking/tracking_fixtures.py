"""A tiny real sweep (2 variants x 2 seeds, the real trainer in this process) that the tracking
tests share, and a real TensorBoard server to read it through."""

import copy
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from ml_collections.config_flags import config_path

from transformer_jax import defaults, sweep_dir
from transformer_jax.run_dir import HPARAMS_FILE, write_json
from transformer_jax.sweep import hparams as sweep_hparams
from transformer_jax.sweep import load_sweep, runner
from transformer_jax.train.seed_group import train_seed_group

# The copy task at the size of tests/tiny_configs.py's TINY: 4 steps, logged every 2,
# evaluated at the end. A constant learning rate: the step count is not in the compiled step, so
# the short first process and every later run share one compile (the session's cache).
TINY_CONFIG = """
from transformer_jax import defaults


def get_config(arg=None):
    config = defaults.base_config("copy")
    config.model.update(d_model=16, num_encoder_layers=1, num_decoder_layers=1, dropout_rate=0.0)
    config.model.attention.num_heads = 2
    config.model.ffn.d_ff = 32
    config.data.update(num_train=64, num_test=16, num_test_long=16, max_len=6, long_min_len=7,
                       long_max_len=8, batch_size=8)
    config.train.update(steps=4, log_every=2, eval_every=4, checkpoint_every=2, warmup_steps=1,
                        schedule="constant", generate_eval=False, diagnostics=False)
    return defaults.apply_arg(config, arg)
"""

TINY_SWEEP = '''
"""Half the data changes a tiny copy model."""
from transformer_jax.sweep import Factor, Sweep


def get_sweep():
    return Sweep(
        config="configs/tiny.py",
        # Variants that compile to the same program (the data differs, not the model).
        factors=(Factor("data_size", {"full": {}, "half": {"data.num_train": 32}}),),
        seeds=(0, 1),
        metrics=("test/seq_accuracy", "test/loss"),
    )
'''


def make_project(root: Path) -> Path:
    """A directory laid out like the repository: configs/tiny.py and experiments/tiny.py."""
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "tiny.py").write_text(TINY_CONFIG)
    (root / "experiments").mkdir()
    (root / "experiments" / "tiny.py").write_text(TINY_SWEEP)
    return root


def train_tiny_sweep(
    project: Path, workdir: Path, wandb_project: str = "", diagnostics: bool = False
) -> None:
    """Trains the tiny sweep in this process, as its runner would: the sweep directory gets the
    HParams experiment and each run directory the hparams.json the launcher writes, then each
    variant's seeds train as one seed group. The "full" variant is stopped after 2 steps and
    resumed to its 4 (a resume of every seed). diagnostics: train.diagnostics (the attention
    statistics among the evaluation metrics)."""
    cwd = os.getcwd()
    os.chdir(project)
    try:
        sweep = load_sweep("experiments/tiny.py")
        workdir, config_spec, specs = runner.plan_checked(
            sweep, str(workdir), None, None, False, runner.DEFAULT_MAIN
        )
        sweep_dir.update_sweep_json(
            workdir,
            runner.resolved_sweep(sweep),
            "experiments/tiny.py",
            config_spec,
            False,
            runner.DEFAULT_MAIN,
        )
        sweep_hparams.write_experiment(workdir, sweep, config_spec)
        for spec in specs:
            os.makedirs(spec.path, exist_ok=True)
            write_json(os.path.join(spec.path, HPARAMS_FILE), spec.hparams)
        for variant, overrides in sweep.variants.items():
            config = defaults.from_file("configs/tiny.py")
            for key, value in overrides.items():
                config_path.set_value(key, config, value)
            config.train.wandb_project = wandb_project
            config.train.diagnostics = diagnostics
            if variant == "full":
                short = copy.deepcopy(config)
                short.train.steps = 2
                train_seed_group(short, os.path.join(workdir, variant), sweep.seeds)
            train_seed_group(config, os.path.join(workdir, variant), sweep.seeds)
    finally:
        os.chdir(cwd)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TensorBoard:
    """A real `tensorboard --logdir` server on 127.0.0.1, stopped by `close`."""

    def __init__(self, logdir: Path, load_fast: str = "false"):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tensorboard.main",
                f"--logdir={logdir}",
                "--host=127.0.0.1",
                f"--port={self.port}",
                f"--load_fast={load_fast}",
                "--reload_interval=1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def get(self, route: str, request: dict | None = None, timeout: float = 600.0):
        """The JSON at `route` (a plugin route takes its request as JSON in ?request=), retried
        until the server answers or `timeout` s pass."""
        url = f"{self.url}{route}"
        if request is not None:
            url += "?request=" + urllib.parse.quote(json.dumps(request))
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(url, timeout=120) as response:
                    return json.loads(response.read())
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def sessions(self, expected: int, timeout: float = 600.0) -> tuple[dict, list[dict]]:
        """(experiment, session groups) once every run is loaded: `expected` sessions with
        their metrics (TensorBoard loads the logdir in the background)."""
        deadline = time.monotonic() + timeout
        while True:
            experiment = self.get("/data/plugin/hparams/experiment", {"experimentName": ""})
            groups = self.get("/data/plugin/hparams/session_groups", session_groups_request())
            groups = groups.get("sessionGroups", [])
            sessions = [s for g in groups for s in g["sessions"]]
            loaded = experiment.get("metricInfos") and all(s.get("metricValues") for s in sessions)
            if (len(sessions) >= expected and loaded) or time.monotonic() > deadline:
                return experiment, groups
            time.sleep(0.5)

    def close(self) -> str:
        self.proc.terminate()
        try:
            output, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            output, _ = self.proc.communicate()
        return output


def session_groups_request() -> dict:
    """A ListSessionGroupsRequest for every session, whatever its status."""
    return {
        "experimentName": "",
        "allowedStatuses": [
            "STATUS_UNKNOWN",
            "STATUS_SUCCESS",
            "STATUS_FAILURE",
            "STATUS_RUNNING",
        ],
        "colParams": [],
        "startIndex": 0,
        "sliceSize": 1000,
    }
