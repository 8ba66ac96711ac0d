"""The tiny model and training configs that tests across the suite share.

`tiny_model("decoder_only", {"attention.num_heads": 1}, dtype="bfloat16")`: a small, fast
config of a family with dotted-path changes (the command-line and sweep syntax) and top-level
fields. `tiny_copy_config(data_dir, steps=20)`: the experiment config of the copy run that the
trained-run fixtures (tests/train, tests/analysis) train in seconds. Test modules import them
directly (tests/ is on pytest's pythonpath).
"""

from collections.abc import Mapping

import ml_collections

from transformer_jax import defaults
from transformer_jax.config import ModelConfig, TrainConfig
from transformer_jax.models import FAMILIES

TINY = ModelConfig(vocab_size=13, d_model=16, num_encoder_layers=1, dropout_rate=0.0).override(
    {"attention.num_heads": 2, "ffn.d_ff": 32, "positional.max_len": 8}
)


def tiny_model(family: str = "decoder_only", changes: Mapping | None = None, **fields):
    """TINY as `family` (decoder_only: 2 layers), with `changes` (dotted) and `fields`."""
    return TINY.override({"family": family, **fields, **(changes or {})})


def tiny_copy_config(
    data_dir,
    steps: int = 60,
    *,
    model: Mapping | None = None,
    data: Mapping | None = None,
    **train,
) -> ml_collections.ConfigDict:
    """The copy task on a 1+1-layer encoder-decoder of width 32, as a ConfigDict the trainer
    takes: 2,000 training examples of 1..8 symbols, 64 test and 64 test_long (9..12). `model`
    and `data` update those parts (dotted paths for the model), `train` the train fields.

    The learning rate warms up, then stays constant: unlike the cosine schedule, whose decay
    horizon is `train.steps` and so a constant of the compiled train step, it lets runs of any
    length share one compiled step through the persistent compilation cache (tests/conftest.py).
    A test of the schedules' shapes asks for one (tests/train/test_optimizer.py)."""
    config = defaults.base_config("copy")
    config.model.update_from_flattened_dict(
        {
            "d_model": 32,
            "num_encoder_layers": 1,
            "num_decoder_layers": 1,
            "dropout_rate": 0.1,
            "attention.num_heads": 2,
            "ffn.d_ff": 64,
            **(model or {}),
        }
    )
    config.data.update(
        {
            "data_dir": str(data_dir),
            "num_train": 2000,
            "num_test": 64,
            "num_test_long": 64,
            "max_len": 8,
            "long_min_len": 9,
            "long_max_len": 12,
            "batch_size": 16,
            **(data or {}),
        }
    )
    train = {
        "log_every": 10,
        "eval_every": 30,
        "checkpoint_every": 20,
        "schedule": "constant",
        "warmup_steps": 5,
        **train,
    }
    config.train.update(steps=steps, **train)
    return config


def tiny_sgd(**fields) -> TrainConfig:
    """SGD at a constant rate: parameters move by exactly lr * gradient, so comparing them
    compares gradients too (Adam's first step is ~lr * sign(gradient), which amplifies rounding
    noise)."""
    return TrainConfig(
        **{
            "optimizer": "sgd",
            "schedule": "constant",
            "warmup_steps": 0,
            "grad_clip_norm": 0.0,
            **fields,
        }
    )


def typed_model(config) -> ModelConfig:
    """config.model with the fields a dataset would fill (vocabulary, lengths, images)."""
    fields = config.model.to_dict()
    family = FAMILIES[fields["family"]]
    if fields["vocab_size"] == defaults.FROM_DATA:
        fields["vocab_size"] = 40
    if fields["positional"]["max_len"] == defaults.FROM_DATA:
        fields["positional"]["max_len"] = 64
    if family.classifier:
        fields["num_classes"] = 10
    if family.reads_images:
        size = config.data.image_size or 8
        fields["vit"].update(image_size=size, num_channels=1)
    return ModelConfig.from_dict(fields)
