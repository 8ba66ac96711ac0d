"""What the libraries a command uses may write into its output, which a sweep keeps as run.log.

TensorFlow Datasets logs routine events at WARNING through absl: "Using custom data
configuration: AlgorithmicConfig(...)" (the whole builder config, several hundred characters,
twice per dataset) and "Variant folder ... has no dataset_info.json" (a dataset not built yet).
The data code states in one line of its own what it builds and where (data/builders.py
`prepare`), so `quiet_library_logs` drops TFDS's records below ERROR; its errors are kept, and
every other library's records pass as they were. TFDS's progress bars and banners are turned off
where the data is built (`builders.prepare`), since tqdm's cursor escapes fill a log file.
"""

import importlib.util
import logging
import os


def _package_dir(name: str) -> str | None:
    """Where package `name` is installed, found without importing it (TFDS takes half a second
    to import, and most commands never need it)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(next(iter(spec.submodule_search_locations)), "")


class _DropTfdsRoutine(logging.Filter):
    """Drops records logged from TFDS's own modules (under `tfds_dir`) below ERROR."""

    def __init__(self, tfds_dir: str):
        super().__init__()
        self._tfds_dir = tfds_dir

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or not record.pathname.startswith(self._tfds_dir)


def quiet_library_logs() -> None:
    """Installs the filter on absl's logger, through which TFDS logs (once per process)."""
    tfds_dir = _package_dir("tensorflow_datasets")
    absl_logger = logging.getLogger("absl")
    if tfds_dir and not any(isinstance(f, _DropTfdsRoutine) for f in absl_logger.filters):
        absl_logger.addFilter(_DropTfdsRoutine(tfds_dir))
