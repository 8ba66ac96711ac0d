"""Character-level decoder-only language model of tiny shakespeare, sized for tuned sweeps.

  TINY_SHAKESPEARE=/path/to/input.txt python -m transformer_jax.main \
      --config=configs/shakespeare_char.py --workdir=runs/shakespeare_char

The file is karpathy/char-rnn's data/tinyshakespeare/input.txt (docs/configs.md says where to
download it); its path comes from the TINY_SHAKESPEARE environment variable or
`--config.data.path`, and a file with another sha256 is refused. Split by position: the first
90% of the characters train, the next 5% validate (what tuned sweeps choose on), the last 5%
test. Unlike the algorithmic tasks, no variant reaches a bound here: after 1,000 steps the
validation loss is still falling (experiments/charlm_attention_scale.py gives the curve and
the cost), so variants can still differ.

configs/char_lm.py's model (GPT-2's pre-norm, GELU and learned positions, with an untied
output layer where GPT-2 ties it and LayerNorm epsilon 1e-6 where GPT-2 has 1e-5), shrunk to 2
layers of d_model=64 (4 heads, d_k=16) without dropout (1,000 steps see ~1/30 of the training
windows once: nothing to overfit), so that one run takes under a minute on 2 CPU cores.
"""

import os
import runpy
from pathlib import Path

from transformer_jax import data, defaults

PATH_VARIABLE = "TINY_SHAKESPEARE"  # environment variable holding the path of input.txt


def get_config(arg: str | None = None):
    config = runpy.run_path(str(Path(__file__).with_name("char_lm.py")))["get_config"]()
    config.data = data.default_data_config("shakespeare_char")
    config.data.path = os.environ.get(PATH_VARIABLE, "")  # input.txt of karpathy/char-rnn
    config.data.seq_len = 64  # characters per training window
    config.data.batch_size = 32  # windows per step: 2,048 characters
    config.model.update(d_model=64, num_decoder_layers=2, dropout_rate=0.0)
    config.model.ffn.d_ff = 256
    config.train.update(
        steps=1000,
        learning_rate=6e-3,  # peak of the cosine schedule; the middle of the sweeps' grid
        warmup_steps=100,
        log_every=50,
        eval_every=100,  # ten evaluations: mean_loss averages them
        checkpoint_every=500,
        eval_examples=512,  # windows of 64 characters per eval split: 32,768 of ~55,800
        # steps_to_threshold: the first evaluation at loss <= 2.0 nats per character, which
        # the base config reached at step 700 of 1,000 (train/curve_metrics.py)
        loss_threshold=2.0,
    )
    return defaults.apply_arg(config, arg)
