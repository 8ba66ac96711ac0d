"""Building a dataset writes one line of its own into the command's output (a sweep's run.log):
none of TFDS's progress bars (terminal escapes), banners or config-long warnings."""

import logging

import pytest
from data_fixtures import small_config

from transformer_jax import library_logs
from transformer_jax.data import load_dataset


@pytest.fixture
def quiet_absl():
    """absl's logger with the commands' filter (commands.parse_flags), removed after."""
    absl_logger = logging.getLogger("absl")
    before = list(absl_logger.filters)
    library_logs.quiet_library_logs()
    yield
    absl_logger.filters[:] = before


def test_a_first_build_says_where_in_one_line_and_nothing_else(tmp_path, capfd, quiet_absl):
    config = small_config("reverse", tmp_path / "tfds")
    capfd.readouterr()
    load_dataset(config)
    load_dataset(config)  # built before: read, nothing said
    captured = capfd.readouterr()
    output = captured.out + captured.err
    assert "\x1b" not in output and "\r" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("Building dataset algorithmic_seq2seq/reverse-sym10-len1to8")
    assert f"data.data_dir={config.data_dir} " in lines[0]
    assert (tmp_path / "tfds" / "algorithmic_seq2seq").is_dir()


def _record(pathname: str, level: int) -> logging.LogRecord:
    return logging.LogRecord("absl", level, pathname, 1, "message", None, None)


def test_only_tfds_records_below_error_are_dropped():
    tfds_dir = library_logs._package_dir("tensorflow_datasets")
    drop = library_logs._DropTfdsRoutine(tfds_dir)
    assert not drop.filter(_record(tfds_dir + "core/dataset_builder.py", logging.WARNING))
    assert drop.filter(_record(tfds_dir + "core/dataset_builder.py", logging.ERROR))
    assert drop.filter(_record("/elsewhere/orbax/checkpoint.py", logging.WARNING))
