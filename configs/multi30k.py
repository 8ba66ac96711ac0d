"""Multi30k task 1 translation with a small Transformer, German -> English by default.

The published reference (SOURCE.md of the data): 3+3 layers, d_model 256, 8 heads, d_ff 512,
dropout 0.1, Adam at 5e-4, 10 epochs, test_2016_flickr BLEU 36.5 (lowercased, tokenized); our
lowercased tokenized BLEU is test/bleu_lc_beam, the detokenized sacreBLEU test/bleu_beam.
The argument picks the direction, `:de-en` (default) or `:en-de`, optionally with `,small`
(the ablation budget of experiments/translation.py: a 2+2-layer d_model 128 model for about 2.6
epochs, ten minutes on one CPU core) and `,quick` (that model for 400 steps, a few minutes).
Offline, point data.manual_dir at the six raw files (the pinned files build the same dataset
as a download, so later runs in the same data_dir need neither):

  python -m transformer_jax.main --config=configs/multi30k.py --workdir=runs/multi30k \
      --config.data.manual_dir=/path/to/multi30k/raw
"""

from transformer_jax import defaults

DIRECTIONS = ("de-en", "en-de")
SMALL = "small"


def get_config(arg: str | None = None):
    parts = [p for p in (arg or "").split(",") if p]
    small = SMALL in parts
    rest = ",".join(p for p in parts if p != SMALL)
    direction, quick = defaults.parse_arg(rest, DIRECTIONS, default="de-en")
    config = defaults.base_config("multi30k")
    source, target = direction.split("-")
    config.data.update(source_language=source, target_language=target, batch_size=128)
    config.model.update(d_model=256, num_encoder_layers=3, num_decoder_layers=3, dropout_rate=0.1)
    config.model.attention.num_heads = 8
    config.model.ffn.d_ff = 512
    config.train.update(
        # 8 epochs of 225 batches (the length buckets' full batches of 128), sized to one hour
        # on 2 CPU cores: 1.79 s per step with nothing else running (0.56 steps/s over 60 steps)
        # is 54 minutes of training, plus about 3 minutes of compiling and two validation
        # evaluations. The reference's 10 epochs (2,250 steps) would take 67 minutes here.
        steps=1800,
        optimizer="adam",
        # Twice the reference's constant 5e-4, as the peak of a warmup (Xiong et al. 2020:
        # post-norm is fragile early) and a cosine decay to zero, which anneals the shorter
        # budget; Adam's b2=0.98 and eps=1e-9 are the paper's.
        learning_rate=1e-3,
        schedule="cosine",
        warmup_steps=250,
        label_smoothing=0.1,
        log_every=60,
        eval_every=900,
        checkpoint_every=300,
    )
    blocks = config.train.evaluators
    blocks.generation.enabled = False  # exact-match accuracy means little for translation
    blocks.bleu.update(enabled=True, beam_size=4, beam_alpha=0.6)  # BLEU instead
    if small or quick:  # A smaller model: two layers each side, d_model 128, 4 heads.
        config.model.update(d_model=128, num_encoder_layers=2, num_decoder_layers=2)
        config.model.attention.num_heads = 4
        config.model.ffn.d_ff = 256
        config.data.batch_size = 64
        config.train.update(
            # 1,200 steps x 64 pairs is 2.6 epochs: 3.2 steps/s per run with two runs at once on
            # the 2-core AMD EPYC (float32 matmul peak 145 GFLOP/s) and nothing else running
            # (`python -m transformer_jax.sweep --sweep=experiments/translation.py --parallel=2`),
            # about 6 minutes of training plus 2 of compiling and decoding.
            steps=1200,
            learning_rate=1e-3,
            warmup_steps=100,
            log_every=50,
            eval_every=600,
            checkpoint_every=600,
            eval_examples=256,
        )
        config.train.evaluators.bleu.examples = 256
    if quick:  # A few minutes on 2 CPU cores: the small model for about one epoch.
        config.train.update(steps=400, warmup_steps=50, eval_every=400, checkpoint_every=400)
    return config
