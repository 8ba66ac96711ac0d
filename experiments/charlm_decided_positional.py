"""Which positional encoding models characters best, decided by seeds until decided?

The claims of experiments/charlm_positional.py (learned, sinusoidal, rotary, ALiBi, none) under
the protocol of experiments/charlm_decided_attention_scale.py. Its comparisons are each
encoding against learned positions (the reference).

Cost: 5 cells x ~32 runs x 136 s = 6.0 h.
"""

import runpy
from pathlib import Path


def get_sweep():
    here = Path(__file__).parent
    protocol = runpy.run_path(str(here / "charlm_decided_attention_scale.py"))
    positional = runpy.run_path(str(here / "charlm_positional.py"))["POSITIONAL"]
    return protocol["decided_sweep"]((positional,))
