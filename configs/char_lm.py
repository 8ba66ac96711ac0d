"""Character-level decoder-only language model on any local UTF-8 text file (GPT-2 style).

  python -m transformer_jax.main --config=configs/char_lm.py --workdir=runs/char_lm \
      --config.data.path=/path/to/corpus.txt

The default corpus is the one text every Python installation ships: the documentation topics
of `pydoc` (pydoc_data/topics.py, ~750 KB of English prose in string literals), so the command
runs anywhere without a download. Pre-norm, GELU (tanh), learned positions and unscaled
embeddings as in GPT-2, but an untied output layer with a bias (GPT-2 ties it to the token table,
without a bias) and LayerNorm epsilon 1e-6 (GPT-2: 1e-5); 90% of the characters train, the next
5% validate, the last 5% test.
"""

import pydoc_data
from pathlib import Path

from transformer_jax import defaults

PYDOC_TOPICS = str(Path(pydoc_data.__file__).with_name("topics.py"))


def get_config(arg: str | None = None):
    config = defaults.base_config("text_file")
    config.data.path = PYDOC_TOPICS  # any UTF-8 text file
    # The last 10% of the characters held out as before (train unchanged): half validation
    # (what tuning chooses on), half test.
    config.data.update(validation_fraction=0.05, test_fraction=0.05)
    config.data.seq_len = 128
    config.data.batch_size = 32
    m = config.model
    m.update(family="decoder_only", d_model=128, num_decoder_layers=4, dropout_rate=0.1)
    m.attention.num_heads = 4
    m.ffn.update(d_ff=512, activation="gelu")
    m.norm.position = "pre"
    m.embeddings.update(tie_output=False, scale=False)
    m.positional.kind = "learned"
    config.train.update(steps=1000, learning_rate=1e-3, warmup_steps=100, eval_every=250)
    return defaults.apply_arg(config, arg)
