"""Confusion matrix of a trained classifier (vit or encoder_classifier) on an evaluation split.

  python -m transformer_jax.analysis.confusion --workdir=runs/vit_digits --out=confusion.png

Row i, column j counts the examples of true class i predicted as class j, so the diagonal holds
the correct predictions and each row sums to the number of examples of its class. Prints the
matrix, the accuracy and the most confused pairs; writes the matrix as a PNG.
"""

import jax
import numpy as np
from absl import app, flags, logging

from transformer_jax.analysis.figures import new_figure, save_png
from transformer_jax.analysis.flags import define_common_flags
from transformer_jax.models.families import FAMILIES, family_of
from transformer_jax.train.restore import LoadedRun, load_run
from transformer_jax.train.step import forward

_BATCH_SIZE = 256


def confusion_matrix(
    labels_N: np.ndarray, predictions_N: np.ndarray, num_classes: int
) -> np.ndarray:
    """(C, C) int64 counts: [i, j] = examples of true class i predicted as class j."""
    matrix_CC = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(matrix_CC, (labels_N, predictions_N), 1)
    return matrix_CC


def predict(run: LoadedRun, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(labels, predicted labels) over the real examples of `split`, each int [N]."""
    if not family_of(run.model_config).classifier:
        classifiers = [name for name in FAMILIES if FAMILIES[name].classifier]
        raise ValueError(
            f"model.family={run.model_config.family!r} of the run is not a classifier; "
            f"valid: {classifiers}"
        )
    valid_splits = ("train",) + run.info.eval_splits
    if split not in valid_splits:
        raise ValueError(f"--split={split!r} is not valid; choose one of {list(valid_splits)}")

    @jax.jit
    def predictions(batch):
        logits_BC, labels_B, _, _ = forward(run.model, run.variables, batch, train=False)
        return labels_B, logits_BC.argmax(-1)

    labels, predicted = [], []
    for batch in run.dataset.eval_batches(split, batch_size=_BATCH_SIZE):
        real_B = batch["example_weights"] > 0
        labels_B, predicted_B = jax.device_get(predictions(batch))
        labels.append(labels_B[real_B])
        predicted.append(predicted_B[real_B])
    return np.concatenate(labels), np.concatenate(predicted)


def report(matrix_CC: np.ndarray, top: int = 5) -> str:
    """The matrix as text, the accuracy and the `top` most frequent confusions."""
    total = matrix_CC.sum()
    lines = [f"accuracy {np.trace(matrix_CC) / max(total, 1):.4f} on {total} examples"]
    width = max(len(str(matrix_CC.max())), 3)
    lines.append("true\\pred " + " ".join(f"{j:>{width}}" for j in range(len(matrix_CC))))
    for i, row in enumerate(matrix_CC):
        lines.append(f"{i:>9} " + " ".join(f"{v:>{width}}" for v in row))
    off_diagonal = [
        (int(matrix_CC[i, j]), i, j)
        for i in range(len(matrix_CC))
        for j in range(len(matrix_CC))
        if i != j and matrix_CC[i, j]
    ]
    for count, i, j in sorted(off_diagonal, reverse=True)[:top]:
        lines.append(f"  {count} x true {i} predicted {j}")
    return "\n".join(lines)


def plot(matrix_CC: np.ndarray, out: str, title: str):
    """Writes the matrix as a heatmap with the counts written in the cells."""
    num_classes = len(matrix_CC)
    size = max(4.0, 0.45 * num_classes + 2.0)
    fig, axes = new_figure(1, 1, size + 1.0, size)
    ax = axes[0, 0]
    image = ax.imshow(matrix_CC, cmap="Blues")
    fig.colorbar(image, ax=ax, shrink=0.8, label="examples")
    if num_classes <= 30:  # beyond that, numbers in cells are unreadable
        threshold = matrix_CC.max() / 2
        for i in range(num_classes):
            for j in range(num_classes):
                color = "white" if matrix_CC[i, j] > threshold else "black"
                ax.text(j, i, str(matrix_CC[i, j]), ha="center", va="center", color=color)
    ax.set_xticks(range(num_classes))
    ax.set_yticks(range(num_classes))
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    accuracy = np.trace(matrix_CC) / max(matrix_CC.sum(), 1)
    ax.set_title(f"{title}\naccuracy {accuracy:.4f}", fontsize=9)
    return save_png(fig, out)


def _define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    flags.DEFINE_string(
        "split",
        None,
        "Split to evaluate; default the first evaluation split.",
        flag_values=flag_values,
    )
    define_common_flags(
        "workdir", "step", "out", required=("workdir", "out"), flag_values=flag_values
    )


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it reads at INFO.
    f = flags.FLAGS
    run = load_run(f.workdir, f.step)
    split = f.split or run.info.eval_splits[0]
    labels_N, predicted_N = predict(run, split)
    matrix_CC = confusion_matrix(labels_N, predicted_N, run.model_config.num_classes)
    print(report(matrix_CC))
    title = f"{run.config.data.name} {split}, step {int(run.state.step)}"
    print(f"wrote {plot(matrix_CC, f.out, title)}")


if __name__ == "__main__":
    _define_flags()
    app.run(main)
