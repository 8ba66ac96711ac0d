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
from transformer_jax.commands import one_line_errors, parse_flags
from transformer_jax.families import FAMILIES, family_of
from transformer_jax.train.restore import LoadedRun, load_run
from transformer_jax.train.step import forward

_BATCH_SIZE = 256


def confusion_matrix(
    labels_E: np.ndarray, predictions_E: np.ndarray, num_classes: int
) -> np.ndarray:
    """(Z, Z) int64 counts, Z classes: [i, j] = examples of true class i predicted as class j."""
    matrix_ZZ = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(matrix_ZZ, (labels_E, predictions_E), 1)
    return matrix_ZZ


def predict(run: LoadedRun, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(labels, predicted labels) over the E real examples of `split`, each int (E,)."""
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
        logits_BZ, labels_B, _, _ = forward(run.model, run.variables, batch, train=False)
        return labels_B, logits_BZ.argmax(-1)

    labels, predicted = [], []
    for batch in run.dataset.eval_batches(split, batch_size=_BATCH_SIZE):
        real_B = batch["example_weights"] > 0
        labels_B, predicted_B = jax.device_get(predictions(batch))
        labels.append(labels_B[real_B])
        predicted.append(predicted_B[real_B])
    return np.concatenate(labels), np.concatenate(predicted)


def report(matrix_ZZ: np.ndarray, top: int = 5) -> str:
    """The matrix as text, the accuracy and the `top` most frequent confusions."""
    total = matrix_ZZ.sum()
    lines = [f"accuracy {np.trace(matrix_ZZ) / max(total, 1):.4f} on {total} examples"]
    width = max(len(str(matrix_ZZ.max())), 3)
    lines.append("true\\pred " + " ".join(f"{j:>{width}}" for j in range(len(matrix_ZZ))))
    for i, row in enumerate(matrix_ZZ):
        lines.append(f"{i:>9} " + " ".join(f"{v:>{width}}" for v in row))
    off_diagonal = [
        (int(matrix_ZZ[i, j]), i, j)
        for i in range(len(matrix_ZZ))
        for j in range(len(matrix_ZZ))
        if i != j and matrix_ZZ[i, j]
    ]
    for count, i, j in sorted(off_diagonal, reverse=True)[:top]:
        lines.append(f"  {count} x true {i} predicted {j}")
    return "\n".join(lines)


def plot(matrix_ZZ: np.ndarray, out: str, title: str):
    """Writes the matrix as a heatmap with the counts written in the cells."""
    num_classes = len(matrix_ZZ)
    size = max(4.0, 0.45 * num_classes + 2.0)
    fig, axes = new_figure(1, 1, size + 1.0, size)
    ax = axes[0, 0]
    image = ax.imshow(matrix_ZZ, cmap="Blues")
    fig.colorbar(image, ax=ax, shrink=0.8, label="examples")
    if num_classes <= 30:  # beyond that, numbers in cells are unreadable
        threshold = matrix_ZZ.max() / 2
        for i in range(num_classes):
            for j in range(num_classes):
                color = "white" if matrix_ZZ[i, j] > threshold else "black"
                ax.text(j, i, str(matrix_ZZ[i, j]), ha="center", va="center", color=color)
    ax.set_xticks(range(num_classes))
    ax.set_yticks(range(num_classes))
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    accuracy = np.trace(matrix_ZZ) / max(matrix_ZZ.sum(), 1)
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


@one_line_errors("confusion")
def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it reads at INFO.
    f = flags.FLAGS
    run = load_run(f.workdir, f.step)
    split = f.split or run.info.eval_splits[0]
    labels_E, predicted_E = predict(run, split)
    matrix_ZZ = confusion_matrix(labels_E, predicted_E, run.model_config.num_classes)
    print(report(matrix_ZZ))
    title = f"{run.config.data.name} {split}, step {int(run.state.step)}"
    print(f"wrote {plot(matrix_ZZ, f.out, title)}")


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=parse_flags("confusion"))
