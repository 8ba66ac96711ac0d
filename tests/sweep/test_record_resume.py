"""A sweep resumed from its record alone (a copy of a committed folder, run directories gone)
in another directory: the record names no directory of the machine, the recorded runs are not
trained again, a failed one is retried, and the report lists the same runs."""

import json
import re
import shutil
import tempfile

from sweep_fixtures import calls, run_demo

from transformer_jax import sweep_record

MACHINE_PATH = re.compile(r"(?<![\w.~<>$])/(?:work|home|root|tmp|Users|var|private)/\S*")


def _record_only_copy(source, target):
    """`source` without its run directories: what results/<sweep>/ holds."""
    target.mkdir(parents=True)
    for path in source.iterdir():
        if path.is_file():
            shutil.copy(path, target / path.name)


def test_a_sweep_resumes_from_its_record_in_another_directory(project):
    first = project / "runs" / "first"
    run_demo(first)
    text = (first / sweep_record.RECORD_FILE).read_text()
    assert str(project) not in text and tempfile.gettempdir() + "/" not in text
    assert not MACHINE_PATH.findall(text.replace("\\n", "\n")), MACHINE_PATH.findall(text)
    record = sweep_record.read_record(str(first))
    assert record[("flaky", 0)]["status"] == "failed"
    assert "<workdir>/flaky/seed_0" in record[("flaky", 0)]["files"]["command.txt"]

    second = project / "elsewhere" / "second"
    _record_only_copy(first, second)
    run_demo(second)
    assert calls(second, "base", 0) == 1  # unpacked, not trained again
    assert calls(second, "flaky", 0) == 2  # the recorded failure, retried
    command = (second / "base" / "seed_0" / "command.txt").read_text()
    assert f"{second}/base/seed_0" in command and "<workdir>" not in command
    before, after = (
        {tuple(line.split(",")[:3]) for line in (path / "runs.csv").read_text().splitlines()}
        for path in (first, second)
    )
    kept = {run for run in before if run[0] != "flaky"}
    assert kept <= after and len(after) == len(before)  # the recorded runs, as recorded
    assert json.loads((second / "base" / "seed_0" / "summary.json").read_text())["step"] == 10
