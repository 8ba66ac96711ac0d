"""Early stopping: end training once an evaluation metric has stopped improving.

"Trained to convergence" needs a criterion a reader can check: the run stops after
`train.early_stop_patience` evaluations in a row in which `train.early_stop_metric` did not
beat its best by more than `train.early_stop_min_delta`, but never before
`train.early_stop_min_steps` (algorithmic tasks often sit at zero sequence accuracy for a
while before they are learnt: that is not a plateau). Metrics whose name ends in "loss" must
fall, every other (accuracies) must rise. The tracker's state travels in each checkpoint's loop
state, so a resumed run counts on where it stopped, and a run that stopped stays stopped. A
resume may change the patience, min_delta or min_steps: the history of the metric (its best, the
best's step and the evaluations since) is kept and judged by the new criterion.
"""

import dataclasses
from typing import Any


@dataclasses.dataclass
class EarlyStopping:
    """The best value so far, when it was reached, and the evaluations since."""

    metric: str  # "split/name", e.g. "test/seq_accuracy"
    patience: int  # evaluations without improvement that stop the run
    min_delta: float  # an improvement must exceed this
    min_steps: int = 0  # no stop before this step
    best: float | None = None
    best_step: int | None = None
    stale: int = 0  # evaluations since the best
    stopped_step: int | None = None

    @property
    def split(self) -> str:
        return self.metric.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.metric.split("/", 1)[1]

    @property
    def stopped(self) -> bool:
        return self.stopped_step is not None

    def holds(self, results: dict[str, dict[str, float]]) -> bool:
        """Whether an evaluation's results (split -> metric -> value) hold the metric."""
        return self.name in results.get(self.split, {})

    def update(self, step: int, results: dict[str, dict[str, float]]) -> bool:
        """Records the evaluation at `step` (split -> metric -> value); True when it stops."""
        values = results.get(self.split, {})
        if self.name not in values:
            raise ValueError(
                f"train.early_stop_metric={self.metric!r}: the evaluation has no metric "
                f"{self.name!r} on split {self.split!r}; valid: {sorted(values)}"
            )
        value = float(values[self.name])
        sign = -1.0 if self.name.endswith("loss") else 1.0
        if self.best is None or sign * (value - self.best) > self.min_delta:
            self.best, self.best_step, self.stale = value, step, 0
        else:
            self.stale += 1
        if self.stale >= self.patience and step >= self.min_steps:
            self.stopped_step = step
        return self.stopped

    def summary(self) -> dict[str, Any]:
        """What summary.json records: the criterion, the best value and, if it stopped, where
        and why."""
        reason = None
        if self.stopped:
            reason = (
                f"{self.metric} did not improve by more than {self.min_delta} in "
                f"{self.patience} evaluations after its best {self.best:.6g} at step "
                f"{self.best_step}"
            )
        return {**dataclasses.asdict(self), "reason": reason}

    @classmethod
    def from_state(cls, state: dict[str, Any], **criterion) -> "EarlyStopping":
        """The tracker of `criterion` (metric, patience, min_delta, min_steps) resumed from a
        checkpoint's record (`summary()`): the history of the same metric, a fresh one for
        another metric. A stop recorded under another criterion holds only if the new one
        would have stopped there too."""
        tracker = cls(**criterion)
        if not state or state.get("metric") != tracker.metric:
            return tracker
        tracker.best, tracker.best_step, tracker.stale = (
            state["best"],
            state["best_step"],
            state["stale"],
        )
        stopped_step = state.get("stopped_step")
        same = all(state.get(k) == v for k, v in criterion.items())
        if stopped_step is not None and (
            same or (tracker.stale >= tracker.patience and stopped_step >= tracker.min_steps)
        ):
            tracker.stopped_step = stopped_step
        return tracker
