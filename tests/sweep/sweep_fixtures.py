"""The stand-in trainer, base config and sweep file the sweep tests run.

The stand-in (fake_main.py) takes exactly the flags transformer_jax.main takes and writes a run
directory per the contract, so the tests exercise the real subprocess launch, logging, failure
recording and resumption without training anything.
"""

import os

from transformer_jax.report.report import write_report
from transformer_jax.sweep import load_sweep, run_sweep

FAKE_MAIN = """
import json, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
mode = args.get("config.fake.mode", "ok")
offset = float(args.get("config.fake.offset", "0.0"))


def train(workdir, seed):
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "calls.txt"), "a") as f:
        f.write(" ".join(sys.argv[1:]) + "\\n")
    with open(os.path.join(workdir, "calls.txt")) as f:
        calls = len(f.read().splitlines())
    with open(os.path.join(workdir, "affinity.json"), "w") as f:
        json.dump(sorted(os.sched_getaffinity(0)), f)
    with open(os.path.join(workdir, "environment.json"), "w") as f:
        names = ("CUDA_VISIBLE_DEVICES", "JAX_COMPILATION_CACHE_DIR")
        json.dump({name: os.environ.get(name) for name in names}, f)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        json.dump({"seed": seed, "config": args["config"], "git_commit": "fake"}, f)
    print("training", workdir, flush=True)
    with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
        for step, loss in ((0, 2.0), (10, 1.0)):
            f.write(json.dumps({"step": step, "split": "train", "time": 0.1, "loss": loss}) + "\\n")
    if mode == "kill":
        os.kill(os.getpid(), 9)
    if mode == "no_summary":
        return 0
    if mode == "fail" or (mode == "fail_once" and calls == 1):
        print("Traceback (most recent call last):", file=sys.stderr)
        print(f"RuntimeError: boom seed {seed}", file=sys.stderr)
        return 1
    acc = 0.5 + offset + 0.01 * seed
    summary = {"status": "diverged" if mode == "diverge" else "finished", "step": 10,
               "metrics": {"test": {"seq_accuracy": acc}}, "num_params": 100,
               "tokens_per_sec": 50.0, "wall_time_s": 0.3,
               "error": "loss is nan" if mode == "diverge" else None}
    with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump(summary, f)
    return 3 if mode == "diverge" else 0


if "seeds" in args:  # A seed group: WORKDIR/seed_<seed>/ for each seed, as main --seeds does.
    codes = []
    for seed in (int(s) for s in args["seeds"].split(",")):
        codes.append(train(os.path.join(args["workdir"], f"seed_{seed}"), seed))
        if codes[-1] == 1:  # An error ends the group's process, as an exception ends main's.
            sys.exit(1)
    sys.exit(max(codes))
sys.exit(train(args["workdir"], int(args["config.seed"])))
"""


FAKE_CONFIG = """
import ml_collections


def get_config(arg=""):
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.model = ml_collections.ConfigDict(
        {"attention": {"scale": "sqrt"}, "d_model": 32, "dropout": 0.1, "tied": True,
         "widths": (1, 2), "note": None}
    )
    config.fake = ml_collections.ConfigDict({"mode": "ok", "offset": 0.0})
    config.train = ml_collections.ConfigDict({"steps": 10 if arg == "quick" else 100})
    return config
"""


SWEEP_FILE = '''
"""Scaling helps: the fake trainer scores higher with a positive offset."""
from transformer_jax.sweep import Sweep


def get_sweep():
    return Sweep(
        config="configs/fake.py",
        variants={
            "base": {},
            "better": {"fake.offset": 0.1},
            "flaky": {"fake.mode": "fail_once"},
            "unstable": {"fake.mode": "diverge"},
        },
        seeds=(0, 1),
        metrics=("test/seq_accuracy",),
        baseline="base",
    )
'''


MACHINE = {"platform": "cpu", "device_kind": "cpu", "device_count": 1, "cpu_count": 2}


def run_demo(workdir, **kwargs):
    """The demo sweep, then its report, as `python -m transformer_jax.sweep` runs them."""
    sweep = load_sweep("experiments/demo.py")
    counts = run_sweep(
        sweep,
        "experiments/demo.py",
        str(workdir),
        main_module="fake_main",
        machine=MACHINE,
        **{"command": "python -m transformer_jax.sweep --sweep=experiments/demo.py", **kwargs},
    )
    write_report(str(workdir))
    return counts


def calls(workdir, variant, seed):
    with open(os.path.join(workdir, variant, f"seed_{seed}", "calls.txt")) as f:
        return len(f.read().splitlines())


def valid_kwargs(**changes):
    kwargs = dict(
        config="configs/algorithmic.py",
        variants={"a": {}, "b": {"model.attention.scale": "none"}},
        seeds=(0, 1),
        metrics=("test/seq_accuracy",),
        baseline="a",
    )
    kwargs.update(changes)
    return kwargs
