"""Bad configs fail at construction with a message naming the dotted field, the value and the fix;
dictionary forms (nested, and the flat layout of old run directories) read back exactly."""

import dataclasses
import json
import math
import re

import pytest

from transformer_jax.config import (
    AttentionConfig,
    EmbeddingConfig,
    FeedForwardConfig,
    ModelConfig,
    NormConfig,
    PositionalConfig,
    TrainConfig,
    UniversalConfig,
    ViTConfig,
)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"d_model": 30, "attention.num_heads": 4}, "model.d_model=30"),
        ({"attention.num_kv_heads": 3}, "model.attention.num_kv_heads=3"),
        (
            {"positional.kind": "rotary", "d_model": 12, "attention.num_heads": 4},
            "head dimension",
        ),
        ({"positional.kind": "fourier"}, "model.positional.kind='fourier'"),
        ({"norm.kind": "groupnorm"}, "'layernorm'"),
        ({"attention.scale": "sqrt"}, "model.attention.scale='sqrt'"),
        ({"attention.impl": "flash"}, "model.attention.impl"),
        ({"ffn.activation": "tanh"}, "model.ffn.activation"),
        ({"norm.position": "middle"}, "model.norm.position"),
        ({"attention.sliding_window": -1}, "model.attention.sliding_window=-1"),
        ({"attention.num_global_tokens": 2}, "model.attention.num_global_tokens=2"),
        ({"dropout_rate": 1.0}, "model.dropout_rate"),
        ({"attention.scale": "constant", "attention.temperature": 0.0}, "attention.temperature"),
        ({"family": "encoder_classifier", "num_classes": 0}, "model.num_classes=0"),
        ({"family": "encoder_decoder", "num_encoder_layers": 0}, "num_encoder_layers"),
        ({"vocab_size": 0}, "model.vocab_size=0"),
        ({"family": "vit", "num_classes": 10}, "model.vit=None must be set exactly"),
        ({"vit.patch_size": 4}, "model.vit=ViTConfig("),
        ({"ffn.dropout_rate": 1.0}, "model.ffn.dropout_rate=1.0"),
        ({"universal.step_signal": "table"}, "model.universal.step_signal='table'"),
        ({"universal.step_signal": "table"}, "['sinusoidal', 'learned']"),
        ({"positional.train_positions": "per_batch"}, "'batch_randomized'"),
        (
            {"positional.eval_positions": "batch_randomized"},
            "model.positional.eval_positions='batch_randomized' evaluates with random subsets",
        ),
        (
            {"positional.eval_positions": "randomized"},
            "train_positions one of ['randomized', 'batch_randomized']",
        ),
        (
            {"positional.kind": "rotary", "positional.eval_positions": "step_offset"},
            "model.positional.eval_positions='step_offset' has no effect with "
            "model.positional.kind='rotary'",
        ),
    ],
)
def test_invalid_configs_name_the_field(changes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ModelConfig().override(changes)


def test_sub_configs_check_themselves_with_dotted_names():
    with pytest.raises(ValueError, match=re.escape("model.attention.num_kv_heads=3 must divide")):
        AttentionConfig(num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match=re.escape("model.norm.kind='groupnorm' is not valid")):
        NormConfig(kind="groupnorm")
    with pytest.raises(ValueError, match=re.escape("model.vit.patch_size=3 must divide")):
        ViTConfig(image_size=8, patch_size=3)


# Every config's float fields, found from the dataclasses so that a new one is covered too.
FLOAT_FIELDS = [
    (cls, f.name)
    for cls in (
        ModelConfig,
        AttentionConfig,
        PositionalConfig,
        NormConfig,
        FeedForwardConfig,
        EmbeddingConfig,
        UniversalConfig,
        ViTConfig,
        TrainConfig,
    )
    for f in dataclasses.fields(cls)
    if f.type is float
]


def test_float_fields_are_all_found():
    found = {f"{cls.PREFIX}.{name}" for cls, name in FLOAT_FIELDS}
    assert {
        "model.dropout_rate",
        "model.attention.temperature",
        "model.attention.dropout_rate",
        "model.positional.base",
        "model.norm.epsilon",
        "model.norm.dyt_alpha_init",
        "model.universal.act_threshold_eps",
        "model.universal.act_halting_bias_init",
        "model.universal.act_ponder_cost",
        "train.learning_rate",
    } <= found


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=repr)
@pytest.mark.parametrize(
    "cls,name", FLOAT_FIELDS, ids=[f"{cls.PREFIX}.{name}" for cls, name in FLOAT_FIELDS]
)
def test_float_fields_reject_nan_and_infinities(cls, name, value):
    with pytest.raises(ValueError, match=re.escape(f"{cls.PREFIX}.{name}={value!r} must be")):
        cls(**{name: value})


@pytest.mark.parametrize(
    "path", ["attention.temperature", "norm.dyt_alpha_init", "universal.act_halting_bias_init"]
)
def test_override_rejects_nan_naming_the_dotted_path(path):
    with pytest.raises(ValueError, match=re.escape(f"model.{path}=nan")):
        ModelConfig().override({path: math.nan})


def test_unknown_field_lists_valid_fields():
    with pytest.raises(ValueError, match=re.escape("unknown config field(s) ['model.n_heads']")):
        ModelConfig.from_dict({"n_heads": 4})


@pytest.mark.parametrize(
    "fields,path",
    [
        ({"attention": {"n_heads": 4}}, "model.attention.n_heads"),
        ({"norm": {"kind": "rmsnorm", "eps": 1e-5}}, "model.norm.eps"),
        ({"positional": {"rotary_base": 500.0}}, "model.positional.rotary_base"),
        ({"ffn": {"hidden": 64}}, "model.ffn.hidden"),
        ({"embeddings": {"tie": False}}, "model.embeddings.tie"),
        ({"universal": {"enabled": True, "ut_steps": 3}}, "model.universal.ut_steps"),
        ({"family": "vit", "num_classes": 10, "vit": {"patch": 4}}, "model.vit.patch"),
        # An old flat name next to the nested sub-configs is not silently converted.
        ({"attention": {"num_heads": 2}, "num_heads": 4}, "model.num_heads"),
    ],
)
def test_unknown_nested_fields_name_the_dotted_path(fields, path):
    prefix = path.rsplit(".", 1)[0]
    with pytest.raises(ValueError, match=re.escape(f"['{path}']; valid fields of {prefix}:")):
        ModelConfig.from_dict(fields)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"attention.n_heads": 4}, "unknown config field(s) ['model.attention.n_heads']"),
        ({"universal.ut_steps": 3}, "unknown config field(s) ['model.universal.ut_steps']"),
        ({"attn.num_heads": 4}, "model.attn is not a sub-config"),
        ({"d_model.size": 4}, "model.d_model is not a sub-config"),
        ({"num_heads": 4}, "unknown config field(s) ['model.num_heads']"),
    ],
)
def test_override_rejects_unknown_paths(changes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ModelConfig().override(changes)


def test_override_changes_only_the_named_fields():
    cfg = ModelConfig().override({"norm.kind": "dyt", "attention.scale": "none", "d_model": 64})
    assert cfg.norm == NormConfig(kind="dyt")
    assert cfg.attention == AttentionConfig(scale="none")
    assert cfg.d_model == 64 and cfg.ffn == FeedForwardConfig() and cfg.universal is None


def test_override_of_universal_switches_it_on_with_defaults():
    cfg = ModelConfig().override({"universal.steps": 3})
    assert cfg.universal == UniversalConfig(steps=3)
    assert cfg.override({"universal.act": True}).universal == UniversalConfig(steps=3, act=True)
    assert cfg.replace(universal=None).universal is None


def test_valid_config_round_trips():
    cfg = ModelConfig.from_dict({"d_model": 64, "attention": {"num_heads": 8, "num_kv_heads": 2}})
    assert cfg.head_dim == 8 and cfg.attention.kv_heads == 2
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_universal_and_vit_helpers():
    assert UniversalConfig().num_steps(6) == 6 and UniversalConfig(steps=2).num_steps(6) == 2
    vit = ViTConfig(image_size=32, patch_size=4)
    assert vit.grid_size == 8 and vit.num_patches == 64


ROUND_TRIP = {
    "defaults": ModelConfig(),
    "universal_act": ModelConfig(
        family="decoder_only",
        universal=UniversalConfig(steps=3, act=True, act_halted="transform"),
        attention=AttentionConfig(num_heads=2, num_kv_heads=1, scale="learned", sliding_window=2),
        positional=PositionalConfig(kind="rotary", base=500.0, max_len=12),
        norm=NormConfig(kind="dyt", position="pre", dyt_learnable_alpha=False),
        ffn=FeedForwardConfig(activation="swiglu", d_ff=48),
        embeddings=EmbeddingConfig(scale=False, tie_output=False),
    ),
    "universal_fixed": ModelConfig(universal=UniversalConfig()),
    "vit": ModelConfig(
        family="vit",
        vocab_size=0,
        num_classes=10,
        d_model=16,
        pooling="mean",
        vit=ViTConfig(image_size=8, num_channels=1, patch_size=2),
    ),
}


@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_to_dict_from_dict_round_trip_through_json(name):
    cfg = ROUND_TRIP[name]
    as_dict = cfg.to_dict()
    assert ModelConfig.from_dict(as_dict) == cfg
    assert ModelConfig.from_dict(json.loads(json.dumps(as_dict))) == cfg
    if cfg.universal is None:
        assert as_dict["universal"] is None
    else:
        assert as_dict["universal"]["enabled"] is True
    assert (as_dict["vit"] is None) == (cfg.family != "vit")


def test_universal_enabled_false_reads_as_off_and_refuses_set_fields():
    fields = ModelConfig().to_dict()
    off = {"enabled": False, **dataclasses.asdict(UniversalConfig())}
    assert ModelConfig.from_dict({**fields, "universal": off}).universal is None
    with pytest.raises(ValueError, match=re.escape("model.universal.act=True has no effect")):
        ModelConfig.from_dict({**fields, "universal": {**off, "act": True}})


def test_vit_fields_of_other_families_are_dropped_only_when_unset():
    fields = ModelConfig().to_dict()
    placeholders = {"image_size": -1, "num_channels": -1, "patch_size": 4}  # from the data
    assert ModelConfig.from_dict({**fields, "vit": placeholders}).vit is None
    with pytest.raises(ValueError, match=re.escape("model.vit.patch_size=8 has no effect")):
        ModelConfig.from_dict({**fields, "vit": {"patch_size": 8}})


# The `model` sections of config.json files written by the flat-config code (commit 92893b4,
# train_and_evaluate on copy and digits), verbatim.
OLD_UNIVERSAL = {
    "act": True,
    "act_halted": "transform",
    "act_halting_bias_init": 1.0,
    "act_ponder_cost": 0.02,
    "act_threshold_eps": 0.05,
    "activation": "swiglu",
    "attention_dropout_rate": 0.1,
    "attention_impl": "auto",
    "attention_scale": "learned",
    "attention_temperature": 97.40123202506219,
    "d_ff": 64,
    "d_model": 32,
    "dropout_rate": 0.0,
    "dtype": "float32",
    "dyt_alpha_init": 0.8,
    "dyt_learnable_alpha": False,
    "family": "encoder_decoder",
    "image_size": -1,
    "max_len": 11,
    "norm": "dyt",
    "norm_epsilon": 1e-06,
    "norm_position": "pre",
    "num_channels": -1,
    "num_classes": 0,
    "num_decoder_layers": 1,
    "num_encoder_layers": 2,
    "num_global_tokens": 1,
    "num_heads": 4,
    "num_kv_heads": 2,
    "patch_size": 4,
    "pooling": "cls",
    "positional": "rotary",
    "remat": "none",
    "residual": True,
    "rotary_base": 500.0,
    "scale_embeddings": False,
    "scan_layers": False,
    "share_source_target_embeddings": False,
    "sliding_window": 3,
    "tie_output_embeddings": False,
    "universal": True,
    "ut_steps": 3,
    "vocab_size": 13,
}
OLD_VIT = {
    "act": False,
    "act_halted": "freeze",
    "act_halting_bias_init": -1.0,
    "act_ponder_cost": 0.01,
    "act_threshold_eps": 0.01,
    "activation": "gelu",
    "attention_dropout_rate": 0.0,
    "attention_impl": "auto",
    "attention_scale": "sqrt_dk",
    "attention_temperature": 97.40123202506219,
    "d_ff": 32,
    "d_model": 16,
    "dropout_rate": 0.0,
    "dtype": "float32",
    "dyt_alpha_init": 0.5,
    "dyt_learnable_alpha": True,
    "family": "vit",
    "image_size": 8,
    "max_len": 4,
    "norm": "layernorm",
    "norm_epsilon": 1e-06,
    "norm_position": "pre",
    "num_channels": 1,
    "num_classes": 10,
    "num_decoder_layers": 2,
    "num_encoder_layers": 1,
    "num_global_tokens": 0,
    "num_heads": 2,
    "num_kv_heads": 0,
    "patch_size": 4,
    "pooling": "mean",
    "positional": "learned",
    "remat": "none",
    "residual": True,
    "rotary_base": 10000.0,
    "scale_embeddings": True,
    "scan_layers": False,
    "share_source_target_embeddings": True,
    "sliding_window": 0,
    "tie_output_embeddings": True,
    "universal": False,
    "ut_steps": 0,
    "vocab_size": 0,
}
# The copy run of tests/analysis/conftest.py: every switch at its default, universal off.
OLD_PLAIN = {
    "act": False,
    "act_halted": "freeze",
    "act_halting_bias_init": -1.0,
    "act_ponder_cost": 0.01,
    "act_threshold_eps": 0.01,
    "activation": "relu",
    "attention_dropout_rate": 0.0,
    "attention_impl": "auto",
    "attention_scale": "sqrt_dk",
    "attention_temperature": 97.40123202506219,
    "d_ff": 64,
    "d_model": 32,
    "dropout_rate": 0.0,
    "dtype": "float32",
    "dyt_alpha_init": 0.5,
    "dyt_learnable_alpha": True,
    "family": "encoder_decoder",
    "image_size": -1,
    "max_len": 11,
    "norm": "layernorm",
    "norm_epsilon": 1e-06,
    "norm_position": "post",
    "num_channels": -1,
    "num_classes": 0,
    "num_decoder_layers": 1,
    "num_encoder_layers": 2,
    "num_global_tokens": 0,
    "num_heads": 2,
    "num_kv_heads": 0,
    "patch_size": 4,
    "pooling": "cls",
    "positional": "sinusoidal",
    "remat": "none",
    "residual": True,
    "rotary_base": 10000.0,
    "scale_embeddings": True,
    "scan_layers": False,
    "share_source_target_embeddings": True,
    "sliding_window": 0,
    "tie_output_embeddings": True,
    "universal": False,
    "ut_steps": 0,
    "vocab_size": 13,
}
OLD_FLAT = {
    "universal": (
        OLD_UNIVERSAL,
        ModelConfig(
            family="encoder_decoder",
            vocab_size=13,
            d_model=32,
            num_encoder_layers=2,
            num_decoder_layers=1,
            dropout_rate=0.0,
            attention=AttentionConfig(
                num_heads=4,
                num_kv_heads=2,
                scale="learned",
                sliding_window=3,
                num_global_tokens=1,
                dropout_rate=0.1,
            ),
            positional=PositionalConfig(kind="rotary", base=500.0, max_len=11),
            norm=NormConfig(
                kind="dyt", position="pre", dyt_alpha_init=0.8, dyt_learnable_alpha=False
            ),
            ffn=FeedForwardConfig(activation="swiglu", d_ff=64),
            embeddings=EmbeddingConfig(scale=False, tie_output=False, share_source_target=False),
            universal=UniversalConfig(
                steps=3,
                act=True,
                act_threshold_eps=0.05,
                act_halting_bias_init=1.0,
                act_ponder_cost=0.02,
                act_halted="transform",
            ),
        ),
    ),
    "vit": (
        OLD_VIT,
        ModelConfig(
            family="vit",
            vocab_size=0,
            num_classes=10,
            d_model=16,
            num_encoder_layers=1,
            dropout_rate=0.0,
            pooling="mean",
            attention=AttentionConfig(num_heads=2),
            positional=PositionalConfig(kind="learned", max_len=4),
            norm=NormConfig(position="pre"),
            ffn=FeedForwardConfig(activation="gelu", d_ff=32),
            vit=ViTConfig(image_size=8, num_channels=1, patch_size=4),
        ),
    ),
    "plain": (
        OLD_PLAIN,
        ModelConfig(
            vocab_size=13,
            d_model=32,
            num_encoder_layers=2,
            num_decoder_layers=1,
            dropout_rate=0.0,
            attention=AttentionConfig(num_heads=2),
            positional=PositionalConfig(max_len=11),
            ffn=FeedForwardConfig(d_ff=64),
        ),
    ),
}


@pytest.mark.parametrize("name", list(OLD_FLAT))
def test_old_flat_config_json_reads_as_the_nested_config(name):
    flat, nested = OLD_FLAT[name]
    cfg = ModelConfig.from_dict(flat)
    assert cfg == nested
    assert ModelConfig.from_dict(nested.to_dict()) == cfg
    assert ModelConfig.from_dict(json.loads(json.dumps(flat))) == cfg


def _float_fields():
    """(config class, field) for every float field of every typed config."""
    import transformer_jax.config as typed

    for cls in [getattr(typed, name) for name in typed.__all__]:
        for field in dataclasses.fields(cls):
            if field.type in (float, "float"):
                yield cls, field.name


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(("cls", "name"), list(_float_fields()))
def test_every_float_field_must_be_finite(cls, name, bad):
    """NaN passes `<= 0` checks; every float field is checked for finiteness by name."""
    with pytest.raises(ValueError, match=rf"\.{name}={bad!r} must be a finite number"):
        cls(**{name: bad})
