"""The lecture ablations on real translation: Multi30k German -> English (configs/multi30k.py).

Claims tested, each against the base Transformer (post-norm LayerNorm, sinusoidal positions,
1/sqrt(d_k), label smoothing 0.1): without 1/sqrt(d_k) attention saturates and learning suffers
(Vaswani §3.2.1); without positions word order is invisible (NTHU slide 21), which costs BLEU
even though a bag of words translates many captions roughly; rotary positions (RoFormer) match
sinusoidal; pre-norm trains as well as post-norm at 3+3 layers (Xiong et al. 2020); label
smoothing hurts perplexity but helps BLEU (Vaswani §5.4). Greedy vs beam search (beam 4,
alpha 0.6) is compared on the same models: every run reports test BLEU of both decodings.

The main metric is the detokenized sacreBLEU of beam search on test_2016_flickr; the lowercased
tokenized BLEU is the one to set beside published numbers. The published setting
(configs/multi30k.py) would take 18 hours for 18 runs on 2 CPU cores, so the sweep runs the `small`
budget of configs/multi30k.py (2+2 layers, d_model 128, 4 heads, d_ff 256, 1,200 steps of 64 pairs:
2.6 epochs, ten minutes a run with two at once); `--quick` cuts that to 400 steps.
Offline, the runs need the data prepared first: any run with
--config.data.manual_dir=<the six raw files> builds it into data_dir (the pinned files are the
same dataset as the download, so later runs without manual_dir reuse it), or copy the files
into TFDS's default manual directory, ~/tensorflow_datasets/downloads/manual/.
"""

from transformer_jax.sweep import Sweep


def get_sweep():
    return Sweep(
        config="configs/multi30k.py",
        config_arg="de-en,small",
        variants={
            "base": {},
            "no_sqrt_dk": {"model.attention.scale": "none"},
            "no_positional": {"model.positional.kind": "none"},
            "rotary": {"model.positional.kind": "rotary"},
            "pre_norm": {"model.norm.position": "pre"},
            "no_label_smoothing": {"train.label_smoothing": 0.0},
        },
        seeds=(0, 1, 2),
        metrics=(
            "test/bleu_beam",
            "test/bleu_lc_beam",
            "test/bleu_greedy",
            "test/bleu_lc_greedy",
            "validation/bleu_greedy",
            "test/loss",
        ),
        baseline="base",
    )
