"""The ViT shapes of Dosovitskiy et al. (2021), Table 1, trained from scratch on a TFDS dataset.

  python -m transformer_jax.main --config=configs/vit_paper.py:s16 --workdir=runs/vit_s16

The argument picks the shape: "ti16", "s16" or "b16" (default), optionally followed by ",quick"
for a laptop smoke run ("quick" alone is s16,quick). All are 12 pre-norm layers with GELU, a
class token and learned position embeddings, 16x16 patches of 224x224 images:
  ti16: d_model 192, 3 heads, d_ff 768 (DeiT-Ti's shape)
  s16:  d_model 384, 6 heads, d_ff 1536 (DeiT-S's shape)
  b16:  d_model 768, 12 heads, d_ff 3072 (ViT-B/16)
The data is CIFAR-10 upsampled to 224x224, with random shifts of up to 4 (stored) pixels and
left-right flips; it must be prepared as array_record in data.data_dir (needs network once):
  tfds build cifar10 --data_dir=~/tensorflow_datasets --file_format=array_record
Optimisation follows the paper's ImageNet recipe (Appendix B.1: Adam b1=0.9, b2=0.999, decoupled
weight decay, global-norm clipping at 1, linear warmup then cosine decay, dropout 0.1) with the
batch size and learning rate scaled down from 4096 and 3e-3 for a single accelerator. Without
large-scale pre-training a ViT on CIFAR-10 stays well below a ResNet (the paper's main point).
Needs an accelerator; compute in bfloat16.
"""

from transformer_jax import defaults

SHAPES = {  # name -> (d_model, num_heads, d_ff)
    "ti16": (192, 3, 768),
    "s16": (384, 6, 1536),
    "b16": (768, 12, 3072),
}


def get_config(arg: str | None = None):
    shape, quick = defaults.parse_arg(arg, SHAPES)
    shape = shape or ("s16" if quick else "b16")
    d_model, num_heads, d_ff = SHAPES[shape]
    config = defaults.base_config("cifar10")
    config.data.update(
        batch_size=512,  # the paper: 4096
        image_size=224,  # upsample 32 -> 224 pixels: 14x14 = 196 patches
        random_shift=4,
        random_flip=True,
    )
    m = config.model
    m.update(
        family="vit",
        d_model=d_model,
        num_encoder_layers=12,
        pooling="cls",
        dropout_rate=0.1,
        dtype="bfloat16",
    )
    m.vit.patch_size = 16
    m.attention.num_heads = num_heads
    m.ffn.update(d_ff=d_ff, activation="gelu")
    m.norm.update(kind="layernorm", position="pre")
    m.positional.kind = "learned"
    config.train.update(
        steps=30_000,  # ~300 epochs of CIFAR-10's 50,000 images, as the paper's ImageNet runs
        optimizer="adamw",
        learning_rate=1e-3,  # peak; the paper: 3e-3 at batch size 4096
        schedule="cosine",
        warmup_steps=3000,  # the paper: 10k of ~94k steps
        b1=0.9,
        b2=0.999,
        eps=1e-8,
        weight_decay=0.1,
        grad_clip_norm=1.0,
        log_every=100,
        eval_every=2000,
        checkpoint_every=2000,
    )
    if quick:
        # A CPU smoke run: stored 32x32 images, 8x8 patches, the model and run shrunk.
        config.data.update(batch_size=32, image_size=0)
        config.model.update(dtype="float32")
        config.model.vit.patch_size = 8
        defaults.shrink(config)
        config.model.attention.num_heads = 4  # shrink keeps ti16's 3 heads, not dividing 64
    return config
