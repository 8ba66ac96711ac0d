"""A run's TensorBoard HParams session: one event file in its run directory.

TensorBoard's HParams plugin (tensorboard/plugins/hparams/backend_context.py) makes one session
of every TensorBoard run (directory) that holds a `_hparams_/session_start_info` summary; the
session's hparams are that summary's, its metrics the last value of every scalar tag of the
directory (the metrics.jsonl curves the logger writes as `split/metric`), and its status the
`_hparams_/session_end_info` summary's. Sessions of one `group` (a sweep's variant: its seeds)
are one row of the table, their metrics averaged.

A sweep's directory holds the experiment (`write_experiment`): the columns, the sweep's declared
metrics first, the diagnostics last. TensorBoard reads one experiment wherever `--logdir`
points; without one (a solo run) it lists every hparam and scalar tag it finds, tags in name
order.

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
from collections.abc import Mapping, Sequence
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
# An identifier, not a quantity: written as its digits. TensorBoard holds every number as a
# double and its table prints 5 significant digits (seed 0 as "0.0000").
SEED = "seed"

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


def session_value(name: str, value: Any) -> HParamValue:
    """An hparam as a session holds it: `hparam_value`, the seed as its decimal text."""
    if name == SEED and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return hparam_value(value)


def is_diagnostic(tag: str) -> bool:
    """Whether a "split/metric" tag is a model diagnostic (attention entropy, ponder time):
    train/step.py flatten_diagnostics names each "<name>/<module path>", the only metric names
    with a "/" of their own."""
    return tag.count("/") >= 2


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
    group: str | None = None,
) -> str:
    """Writes (replaces) the HParams session of the run directory `run_path`; returns its file,
    the one already there when it says the same and is still read last.

    hparams: name -> value (`session_value` converts each). start_time: seconds since the epoch
    when the run started (now when None). status: the run's outcome ("finished", "diverged",
    "failed", "stopped") for the session's end, None while it trains. metrics: "split/metric"
    -> final value, written as scalars at `step`. group: the session group (TensorBoard's
    group_name), shared by the seeds of a variant so that its table averages them; None: a
    group of its own.
    """
    now = time.time()
    start_time = now if start_time is None else start_time
    values = {str(name): session_value(str(name), value) for name, value in hparams.items()}
    # An empty group name makes the session a group of its own (a missing one would group the
    # sessions whose hparams hash alike, which seeds never do).
    events = [event_pb2.Event(wall_time=now, file_version="brain.Event:2")]
    start = hparams_summary.hparams_pb(values, trial_id=group or "", start_time_secs=start_time)
    events.append(event_pb2.Event(wall_time=now, step=0, summary=start))
    if metrics:
        scalars = summary_pb2.Summary()
        for tag, value in metrics.items():
            scalars.value.extend(scalar_summary.scalar_pb(tag, float(value)).value)
        events.append(event_pb2.Event(wall_time=now, step=int(step), summary=scalars))
    if status is not None:
        end = plugin_data_pb2.SessionEndInfo(status=_STATUS[status], end_time_secs=now)
        data = plugin_data_pb2.HParamsPluginData(session_end_info=end)
        summary = _plugin_summary(metadata.SESSION_END_INFO_TAG, data)
        events.append(event_pb2.Event(wall_time=now, step=int(step), summary=summary))
    return _replace(run_path, events, now)


def write_experiment(
    path: str | os.PathLike, hparams: Mapping[str, Sequence[Any]], metrics: Sequence[str]
) -> str:
    """Writes (replaces) the HParams experiment of the sweep directory `path`: the columns of
    TensorBoard's table, in this order; returns its file.

    hparams: name -> every value its sessions take (`session_value` converts each); metrics:
    "split/metric" tags, the first five shown at first. Sessions keep every value they hold;
    a metric left out has no column.
    """
    now = time.time()
    experiment = api_pb2.Experiment(
        hparam_infos=[_hparam_info(name, values) for name, values in hparams.items()],
        metric_infos=[api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag)) for tag in metrics],
    )
    data = plugin_data_pb2.HParamsPluginData(experiment=experiment)
    events = [
        event_pb2.Event(wall_time=now, file_version="brain.Event:2"),
        event_pb2.Event(wall_time=now, summary=_plugin_summary(metadata.EXPERIMENT_TAG, data)),
    ]
    return _replace(path, events, now)


def _hparam_info(name: str, values: Sequence[Any]) -> api_pb2.HParamInfo:
    """The column of one hparam: its type and domain as the plugin infers them from sessions
    (bools and text discrete, numbers an interval, mixed types text), distinct values in the
    order given."""
    distinct = list(dict.fromkeys(session_value(name, v) for v in values))
    info = api_pb2.HParamInfo(name=name, differs=len(distinct) > 1)
    if distinct and all(isinstance(v, bool) for v in distinct):
        info.type = api_pb2.DATA_TYPE_BOOL
        info.domain_discrete.extend(distinct)
    elif distinct and all(isinstance(v, int | float) and not isinstance(v, bool) for v in distinct):
        info.type = api_pb2.DATA_TYPE_FLOAT64
        info.domain_interval.min_value = min(distinct)
        info.domain_interval.max_value = max(distinct)
    else:
        info.type = api_pb2.DATA_TYPE_STRING
        info.domain_discrete.extend(dict.fromkeys(str(v) for v in distinct))
    return info


def _replace(run_path: str | os.PathLike, events: list[event_pb2.Event], now: float) -> str:
    """Writes `events` as the directory's one `.hparams` file, unless the one there says the
    same and is still read last; returns the file."""
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


def _plugin_summary(tag: str, data: plugin_data_pb2.HParamsPluginData) -> summary_pb2.Summary:
    value = summary_pb2.Summary.Value(
        tag=tag,
        metadata=metadata.create_summary_metadata(data),
        tensor=metadata.NULL_TENSOR,
    )
    return summary_pb2.Summary(value=[value])
