"""Metrics of a run's whole evaluation curve, which keep separating variants after the final
loss and accuracy sit at their bounds.

Every evaluation split that reports a loss gets, at each evaluation:
- `mean_loss`: the mean of the split's loss over the evaluations that measured it so far (every
  `every` steps of the teacher_forced block, train.eval_every by default; the area under the
  loss curve divided by the number of evaluations), lower for a run that learns sooner even when
  two runs end at the same loss;
- `steps_to_threshold` (only with `train.loss_threshold` > 0): the step of the first evaluation
  whose loss was at or below the threshold. Absent until it is reached, so a run that never
  reaches it does not report it (a sweep's table then counts only the seeds that did: its n says
  how many).

The record (per split: the sum and count of the losses and the step the threshold was reached)
travels in each checkpoint's loop state, so a resumed run's values equal an uninterrupted one's.
"""

import dataclasses
from typing import Any

MEAN_LOSS = "mean_loss"
STEPS_TO_THRESHOLD = "steps_to_threshold"


@dataclasses.dataclass
class CurveMetrics:
    """Per split: the losses seen so far (their sum and count) and when the threshold was hit."""

    threshold: float = 0.0  # train.loss_threshold; 0 = no steps_to_threshold
    loss_sum: dict[str, float] = dataclasses.field(default_factory=dict)
    evaluations: dict[str, int] = dataclasses.field(default_factory=dict)
    reached: dict[str, int] = dataclasses.field(default_factory=dict)

    def record(self, step: int, results: dict[str, dict[str, float]]) -> None:
        """Counts the evaluation at `step` (split -> metric -> value) and adds the curve metrics
        to `results`."""
        for split, values in results.items():
            if "loss" not in values:
                continue
            loss = float(values["loss"])
            self.loss_sum[split] = self.loss_sum.get(split, 0.0) + loss
            self.evaluations[split] = self.evaluations.get(split, 0) + 1
            if self.threshold > 0 and split not in self.reached and loss <= self.threshold:
                self.reached[split] = step
        self.annotate(results)

    def annotate(self, results: dict[str, dict[str, float]]) -> None:
        """Adds the curve metrics so far to `results` without counting it as an evaluation (a
        repeated final evaluation: a run resumed at its end)."""
        for split, count in self.evaluations.items():
            if "loss" in results.get(split, {}):  # not a split only another evaluator measured
                results[split][MEAN_LOSS] = self.loss_sum[split] / count
                if split in self.reached:
                    results[split][STEPS_TO_THRESHOLD] = float(self.reached[split])

    def state(self) -> dict[str, Any]:
        """The checkpointed record (floats are stored exactly by JSON's repr)."""
        return {"loss_sum": self.loss_sum, "evaluations": self.evaluations, "reached": self.reached}

    @classmethod
    def from_state(cls, state: dict[str, Any], threshold: float) -> "CurveMetrics":
        """The record of a checkpoint's loop state ({} for a fresh run or an older checkpoint).
        A resume that changes the threshold keeps the steps recorded under the old one."""
        return cls(
            threshold=threshold,
            loss_sum=dict(state.get("loss_sum", {})),
            evaluations={k: int(v) for k, v in state.get("evaluations", {}).items()},
            reached={k: int(v) for k, v in state.get("reached", {}).items()},
        )
