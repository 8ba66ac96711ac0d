"""Figure plumbing shared by the analysis commands: matplotlib's object API on the Agg canvas.

No pyplot, so importing a command changes no global backend state and works headless.
"""

import io
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from transformer_jax import run_dir

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def new_figure(nrows: int, ncols: int, width: float, height: float) -> tuple[Figure, np.ndarray]:
    """A figure and its axes as a (nrows, ncols) array, whatever the grid size."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def save_png(fig: Figure, path: str | Path, dpi: int = 100) -> Path:
    """Writes `fig` as PNG at `path` (parents created) and returns the path: atomically
    (run_dir.write_bytes), so a full disk names the file and leaves no half-written PNG."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    run_dir.write_bytes(path, buffer.getvalue())
    return path
