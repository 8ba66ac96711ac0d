"""A run's TensorBoard HParams session: one event file in its run directory.

TensorBoard's HParams plugin (tensorboard/plugins/hparams/backend_context.py) makes one session
of every TensorBoard run (directory) that holds a `_hparams_/session_start_info` summary; the
session's hparams are that summary's, its metrics the last value of every scalar tag of the
directory (the metrics.jsonl curves the logger writes as `split/metric`), and its status the
`_hparams_/session_end_info` summary's. No experiment summary is written: the plugin then takes
the hparams and metrics of whatever directories `--logdir` spans (one sweep, several, one run).

So that a run is one session however often it is written (at its start, at its end, again by a
resumed process or by a report rebuilt later), the session lives in one file,
`events.out.tfevents.<time>.hparams`, replaced (written anew, the older one deleted) each time
it changes: the plugin keeps the first session_start_info it reads in a directory, so two files
would leave the stale one in force. Its name sorts after the logger's event files of the same
directory, which TensorBoard reads in name order.

With `metrics` (the final metrics of summary.json, or of a report's runs.csv for a run directory
that no longer exists), the file also holds them as scalars at the final step, so the session's
metrics equal summary.json even where no curve was logged.
"""

import contextlib
import glob
import io
import os
import time
from collections.abc import Mapping
from typing import Any

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
from tensorboard.plugins.hparams import summary_v2 as hparams_summary
from tensorboard.plugins.scalar import summary_v2 as scalar_summary
from tensorboard.summary.writer.record_writer import RecordWriter

from transformer_jax.run_dir import write_bytes

SESSION_SUFFIX = ".hparams"  # events.out.tfevents.<time>.hparams
HParamValue = bool | int | float | str

# How a run's status (summary.json, or a report's classification) shows in the HParams table.
_STATUS = {
    "finished": api_pb2.STATUS_SUCCESS,
    "diverged": api_pb2.STATUS_FAILURE,
    "failed": api_pb2.STATUS_FAILURE,
    "stopped": api_pb2.STATUS_RUNNING,  # a signal stopped it; rerunning resumes it
}


def hparam_value(value: Any) -> HParamValue:
    """An override value as an HParams value: bool, int, float and str as they are, anything
    else (a tuple of splits, None) as its text."""
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):  # config.json stores tuples as lists
        value = tuple(value)
    return repr(value)


def flat_metrics(metrics: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """summary.json's {split: {metric: value}} as the logger's scalar tags {"split/metric": v}."""
    return {
        f"{split}/{name}": value
        for split, values in metrics.items()
        for name, value in values.items()
    }


def session_files(run_path: str | os.PathLike) -> list[str]:
    """The HParams session files of a run directory (one, or none before its first write)."""
    return sorted(glob.glob(os.path.join(glob.escape(os.fspath(run_path)), f"*{SESSION_SUFFIX}")))


def read_session_start(run_path: str | os.PathLike) -> plugin_data_pb2.SessionStartInfo | None:
    """The session start of a run directory's session file (its hparams and start time), or
    None without one."""
    for path in session_files(run_path):
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                if value.tag == metadata.SESSION_START_INFO_TAG:
                    return metadata.parse_session_start_info_plugin_data(
                        value.metadata.plugin_data.content
                    )
    return None


def write_session(
    run_path: str | os.PathLike,
    hparams: Mapping[str, Any],
    *,
    start_time: float | None = None,
    status: str | None = None,
    step: int = 0,
    metrics: Mapping[str, float] | None = None,
) -> str:
    """Writes (replaces) the HParams session of the run directory `run_path`; returns its file,
    the one already there when it says the same and is still read last.

    hparams: name -> value (`hparam_value` converts each). start_time: seconds since the epoch
    when the run started (now when None). status: the run's outcome ("finished", "diverged",
    "failed", "stopped") for the session's end, None while it trains. metrics: "split/metric"
    -> final value, written as scalars at `step`.
    """
    now = time.time()
    start_time = now if start_time is None else start_time
    values = {str(name): hparam_value(value) for name, value in hparams.items()}
    # An empty trial id: the session is a group of its own (the plugin otherwise groups the
    # sessions whose hparams hash alike, and shows one row for them).
    events = [event_pb2.Event(wall_time=now, file_version="brain.Event:2")]
    start = hparams_summary.hparams_pb(values, trial_id="", start_time_secs=start_time)
    events.append(event_pb2.Event(wall_time=now, step=0, summary=start))
    if metrics:
        scalars = summary_pb2.Summary()
        for tag, value in metrics.items():
            scalars.value.extend(scalar_summary.scalar_pb(tag, float(value)).value)
        events.append(event_pb2.Event(wall_time=now, step=int(step), summary=scalars))
    if status is not None:
        end = plugin_data_pb2.SessionEndInfo(status=_STATUS[status], end_time_secs=now)
        events.append(event_pb2.Event(wall_time=now, step=int(step), summary=_end_summary(end)))

    previous = session_files(run_path)
    others = glob.glob(os.path.join(glob.escape(os.fspath(run_path)), "events.out.tfevents.*"))
    # A sweep rerun to resume its other runs writes the session of every finished one again:
    # an unchanged session still read last is left as it is, so results already committed do
    # not change by a rerun.
    if (
        len(previous) == 1
        and _stamp(previous[0]) == max(_stamp(path) for path in others)
        and _session_content(_read_events(previous[0])) == _session_content(events)
    ):
        return previous[0]

    buffer = io.BytesIO()
    records = RecordWriter(buffer)
    for event in events:
        records.write(event.SerializeToString())
    # Named after every event file of the directory, the previous session's included:
    # TensorBoard reads a directory's event files in name order.
    stamp = max([int(now)] + [_stamp(path) + 1 for path in others])
    path = os.path.join(os.fspath(run_path), f"events.out.tfevents.{stamp:010d}{SESSION_SUFFIX}")
    write_bytes(path, buffer.getvalue())
    for old in previous:
        if old != path:
            with contextlib.suppress(FileNotFoundError):  # a concurrent writer removed it
                os.remove(old)
    return path


def _read_events(path: str) -> list[event_pb2.Event]:
    """The events of a session file; none when it cannot be read (then it is written anew)."""
    try:
        return list(EventFileLoader(path).Load())
    except Exception:  # whatever the damage, the file is written anew
        return []


def _session_content(events: list[event_pb2.Event]) -> list[tuple[int, str, Any]]:
    """What a session says, without when it was written: (step, tag, content) of every summary
    value, the session's start and end parsed (a map's serialized order is not kept) and the
    end's own time cleared."""
    content = []
    for event in events:
        for value in event.summary.value:
            data = value.metadata.plugin_data.content
            if value.tag == metadata.SESSION_START_INFO_TAG:
                item = metadata.parse_session_start_info_plugin_data(data)
            elif value.tag == metadata.SESSION_END_INFO_TAG:
                item = metadata.parse_session_end_info_plugin_data(data)
                item.end_time_secs = 0
            else:
                item = (data, value.tensor.SerializeToString())
            content.append((event.step, value.tag, item))
    return content


def _stamp(path: str) -> int:
    """The time in an event file's name, events.out.tfevents.<time>...; 0 if it has none."""
    parts = os.path.basename(path).split(".")
    try:
        return int(parts[3])
    except (IndexError, ValueError):
        return 0


def _end_summary(end: plugin_data_pb2.SessionEndInfo) -> summary_pb2.Summary:
    data = plugin_data_pb2.HParamsPluginData(session_end_info=end)
    value = summary_pb2.Summary.Value(
        tag=metadata.SESSION_END_INFO_TAG,
        metadata=metadata.create_summary_metadata(data),
        tensor=metadata.NULL_TENSOR,
    )
    return summary_pb2.Summary(value=[value])
