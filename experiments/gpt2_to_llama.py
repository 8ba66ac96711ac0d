"""The walk from GPT-2 to Llama on characters: what does each step buy at this scale?

The architecture walk that ends the normalization part of the NCCU slides (62): from GPT-2
(Radford et al. 2019) to Llama (Touvron et al. 2023; Llama 3.2), one change at a time, each
step keeping the ones before it, on tiny shakespeare characters (configs/shakespeare_char.py: a
2-layer pre-norm decoder, d_model 64, 4 heads, d_ff 256, 1,000 steps):

1. gpt2: learned positions, LayerNorm, GELU, biases on every dense layer (the base config);
2. rmsnorm: RMSNorm (Zhang and Sennrich 2019) for every LayerNorm;
3. rotary: rotary positions (Su et al. 2021) for the learned table;
4. swiglu: the SwiGLU feed-forward network (Shazeer 2020) at matched parameter count: three
   d x d_ff matrices at d_ff = 170 (8/3 d, Llama's rule, rounded down) for GELU's two at 256:
   33,044 parameters per layer for 33,088;
5. gqa: grouped-query attention (Ainslie et al. 2023), 2 key-value heads for the 4 query heads;
6. llama: no biases in the attention, the feed-forward network or the output layer.

Every step keeps the base config's untied output layer (GPT-2 and Llama 3.2 1B tie it, Llama 2
does not), so the walk changes the steps above and nothing else. Parameters with the tiny
shakespeare vocabulary (65 characters and 3 special ids) and its 64-character windows
(PARAMETERS, checked by tests/experiments/test_gpt2_to_llama.py):

| step | parameters |
|---|---|
| gpt2 | 112,964 |
| rmsnorm | 112,644 |
| rotary | 108,548 |
| swiglu | 108,460 |
| gqa | 100,140 |
| llama | 98,880 |

Under the decided character-LM protocol of experiments/charlm_decided_attention_scale.py
(`decided_sweep`: each step tuned over the peak learning rate and warmup, confirmed on fresh
seeds in rounds until decided within 0.02 nats of test loss). Its comparisons are each step
against gpt2 (the reference); what a single step buys is the difference of two neighbouring
rows of its table.

Cost: 6 cells x ~32 runs x 136 s = 7.3 h on 2 CPU cores.
"""

import runpy
from pathlib import Path

from transformer_jax.sweep import Factor

# Each step's own changes, applied on top of every step before it.
CHANGES = {
    "gpt2": {},
    "rmsnorm": {"model.norm.kind": "rmsnorm"},
    "rotary": {"model.positional.kind": "rotary"},
    "swiglu": {"model.ffn.activation": "swiglu", "model.ffn.d_ff": 170},
    "gqa": {"model.attention.num_kv_heads": 2},
    "llama": {
        "model.attention.use_bias": False,
        "model.ffn.use_bias": False,
        "model.embeddings.output_bias": "never",
    },
}
# Each step's parameter count on tiny shakespeare (the table above).
PARAMETERS = {
    "gpt2": 112_964,
    "rmsnorm": 112_644,
    "rotary": 108_548,
    "swiglu": 108_460,
    "gqa": 100_140,
    "llama": 98_880,
}


def walk() -> dict[str, dict]:
    """step -> its overrides: its own changes and those of every step before it."""
    levels, overrides = {}, {}
    for step, changes in CHANGES.items():
        overrides = {**overrides, **changes}
        levels[step] = dict(overrides)
    return levels


STEP = Factor("step", walk())


def get_sweep():
    protocol = runpy.run_path(str(Path(__file__).with_name("charlm_decided_attention_scale.py")))
    return protocol["decided_sweep"]((STEP,))
