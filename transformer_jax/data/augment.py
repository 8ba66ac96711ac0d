"""Image batch transforms on the host, in NumPy: random shifts and flips for training, resizing.

All take and return uint8 (B, Y, X, C) (the stored pixels), so they run before the conversion
to float and cost little. The random ones draw from the `np.random.Generator` they are given:
the pipeline derives it from (seed, batch index), which makes augmentation reproducible and
resumable.
"""

import numpy as np
from PIL import Image

_PIL_MODES = {1: "L", 3: "RGB"}


def random_shift(images_BYXC: np.ndarray, max_shift: int, rng: np.random.Generator) -> np.ndarray:
    """Translates each image by dy, dx in [-max_shift, max_shift], filling with zeros.

    The same as "random crop with padding" (pad every side by max_shift, crop back to H x W at
    a random offset), the usual CIFAR augmentation; max_shift=0 returns the images unchanged.
    """
    if max_shift == 0:
        return images_BYXC
    b, h, w, _ = images_BYXC.shape
    m = max_shift
    padded_BYXC = np.pad(images_BYXC, ((0, 0), (m, m), (m, m), (0, 0)))
    dy_B, dx_B = rng.integers(0, 2 * m + 1, size=(2, b))
    return np.stack(
        [padded_BYXC[i, dy_B[i] : dy_B[i] + h, dx_B[i] : dx_B[i] + w] for i in range(b)]
    )


def random_flip(images_BYXC: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Mirrors each image left-right with probability 1/2."""
    flip_B = rng.random(images_BYXC.shape[0]) < 0.5
    return np.where(flip_B[:, None, None, None], images_BYXC[:, :, ::-1], images_BYXC)


def resize(images_BYXC: np.ndarray, size: int) -> np.ndarray:
    """Bilinear resize of uint8 images to (B, size, size, C), with Pillow; C must be 1 or 3."""
    b, h, w, c = images_BYXC.shape
    if (h, w) == (size, size):
        return images_BYXC
    if c not in _PIL_MODES:
        raise ValueError(
            f"data.image_size={size} resizes images with 1 or 3 channels; these have {c}"
        )
    out = np.empty((b, size, size, c), dtype=np.uint8)
    for i in range(b):
        image = Image.fromarray(images_BYXC[i, ..., 0] if c == 1 else images_BYXC[i])
        resized = np.asarray(image.resize((size, size), Image.Resampling.BILINEAR))
        out[i] = resized.reshape(size, size, c)
    return out
