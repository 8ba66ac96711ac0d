"""The command line: flags, --quick, --report_only and the exit status for a bad sweep file."""

import os
import subprocess
import sys


def test_cli_quick_and_report_only(project):
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "transformer_jax.sweep", "--sweep=experiments/demo.py"]
    cmd += ["--workdir=out", "--main_module=fake_main", "--quick", "--variants=base,better"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "[4/4]" in done.stderr and "ETA" in done.stderr
    assert "--config=configs/fake.py:quick" in (project / "out/base/seed_0/command.txt").read_text()
    report = (project / "out" / "report.md").read_text()
    assert "--quick" in report and "(quick: every run shrunk)" in report
    (project / "out" / "report.md").unlink()

    cmd = [sys.executable, "-m", "transformer_jax.sweep", "--workdir=out", "--report_only"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert (project / "out" / "report.md").exists()

    bad = [sys.executable, "-m", "transformer_jax.sweep", "--sweep=nope.py", "--workdir=out"]
    done = subprocess.run(bad, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 2 and "sweep file 'nope.py' does not exist" in done.stderr
