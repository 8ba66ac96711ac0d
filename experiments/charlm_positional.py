"""Which positional encoding models characters best, each at its own learning rate and warmup?

The positional claims of experiments/positional_tuned.py (sinusoidal, learned, rotary, ALiBi,
no positions; Vaswani §3.5, Su et al. 2021, Press et al. 2022), rerun on tiny shakespeare
characters (configs/shakespeare_char.py, a 2-layer decoder with learned positions as the
reference, 1,000 steps), where the variants are not at a ceiling. A causal decoder can infer
position without an encoding (Haviv et al. 2022): "none" tests that here. Tuned over the peak
learning rate and warmup of experiments/charlm_attention_scale.py, chosen on validation loss,
with its equivalence margins.

Budget (2 CPU cores; the measurement is in experiments/charlm_attention_scale.py): a run of
the 2-layer base config takes ~45 s. 5 cells x (3 rates x 2 warmups x 3 seeds + 3 confirmation
seeds) = 105 runs x 45 s = 4,725 s = 1.3 h.
"""

import runpy
from pathlib import Path

from transformer_jax.sweep import Factor

POSITIONAL = Factor(
    "positional",
    {
        "learned": {},
        **{
            kind: {"model.positional.kind": kind}
            for kind in ("sinusoidal", "rotary", "alibi", "none")
        },
    },
)


def get_sweep():
    protocol = runpy.run_path(str(Path(__file__).with_name("charlm_attention_scale.py")))
    return protocol["charlm_sweep"]((POSITIONAL,))
