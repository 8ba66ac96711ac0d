"""The typed model configuration: small frozen sub-configs, one per concern, built once from
`config.model` and validated before anything compiles.

Layers never see the ml_collections ConfigDict, and each layer receives only its slice:
attention layers an `AttentionConfig`, norms a `NormConfig`, and so on. A sub-config whose
string switches name registry entries is declared beside its registry (`AttentionConfig`,
`PositionalConfig`, `NormConfig` and `FeedForwardConfig` in `transformer_jax.layers.attention`,
`.positional`, `.norms` and `.feedforward`) and composed here with the model-wide fields;
`model.family` names an entry of `transformer_jax.families`. Adding an option to a registry is
all it takes for the config to accept it, and the imports only go downwards: layers and models
read configs, configs read registries.

Defaults follow the base Transformer of Vaswani et al. (2017) in its choices (post-norm
LayerNorm, ReLU, sinusoidal positions, 1/sqrt(d_k), scaled and tied embeddings), at a size
that trains on a laptop CPU.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from transformer_jax import fields as F
from transformer_jax.families import FAMILIES
from transformer_jax.layers.attention import AttentionConfig
from transformer_jax.layers.feedforward import FeedForwardConfig
from transformer_jax.layers.norms import NormConfig
from transformer_jax.layers.positional import PositionalConfig, PositionalEncoding, encoding
from transformer_jax.layers.step_signals import STEP_SIGNALS
from transformer_jax.tokens import DATASET_TOKENS, TokenConfig  # noqa: F401 (re-exported)

DTYPES = ("float32", "bfloat16", "float16")
POOLINGS = ("cls", "mean")  # classifier families: a prepended class token, or the mean
ACT_HALTED = ("freeze", "transform")  # what a halted position's state does in later steps
HALTING_INPUTS = ("block_output", "step_input")  # what ACT's halting unit reads at a step
REMATS = ("none", "full", "dots_saveable")  # see transformer_jax.models.scan
# model.embeddings.output_bias: which output layers add a learned bias (V,) to the logits.
OUTPUT_BIASES = ("untied", "always", "never")


@dataclasses.dataclass(frozen=True)
class EmbeddingConfig:
    """Token embeddings (Vaswani §3.4)."""

    PREFIX: ClassVar[str] = "model.embeddings"

    scale: bool = True  # multiply token embeddings by sqrt(d_model)
    tie_output: bool = True  # output projection = transposed token embedding
    share_source_target: bool = True  # one table for encoder and decoder tokens
    # A norm (model.norm's kind and epsilon) of each stack's input: token embeddings plus
    # positions, before dropout (BART's layernorm_embedding, BERT's embeddings LayerNorm).
    norm: bool = False
    # untied: only an untied output layer has a bias (the Dense's); always: a tied one adds a
    # bias too (Marian's final_logits_bias); never: neither (GPT-2's and Llama's lm_head).
    output_bias: str = "untied"

    def __post_init__(self):
        for name in ("scale", "tie_output", "share_source_target", "norm"):
            F.check_bool(f"{self.PREFIX}.{name}", getattr(self, name))
        F.check_choice(f"{self.PREFIX}.output_bias", self.output_bias, OUTPUT_BIASES)

    @property
    def has_output_bias(self) -> bool:
        """Whether the output layer adds a bias to the logits."""
        return self.output_bias == "always" or (
            self.output_bias == "untied" and not self.tie_output
        )


@dataclasses.dataclass(frozen=True)
class UniversalConfig:
    """Universal Transformer (Dehghani et al. 2019): every stack is ONE block applied
    recurrently with shared weights, optionally with Adaptive Computation Time (Graves 2016).
    See transformer_jax.models.universal. On the command line: model.universal.enabled=True."""

    PREFIX: ClassVar[str] = "model.universal"

    steps: int = 0  # steps (fixed mode) or maximum steps (ACT); 0: the stack's layer count
    # ACT per position: halt once the summed halting probabilities exceed 1 - act_threshold_eps;
    # the output is the halting-weighted sum of the states.
    act: bool = False
    act_threshold_eps: float = 0.01  # in (0, 1]; 1 makes every position halt after one step
    # Halting unit p = sigmoid(W s + b), b initialised to this. tensor2tensor's +1 makes most
    # positions halt after about 2 steps at initialisation; negative delays halting.
    act_halting_bias_init: float = -1.0
    act_ponder_cost: float = 0.01  # tau: the loss gains tau * mean(N + R) over real positions
    # freeze: a halted position's state is copied unchanged to later steps (the paper);
    # transform: it keeps being transformed, as in tensor2tensor, so what the still-running
    # positions attend to differs; the halted position's own output is frozen either way.
    act_halted: str = "freeze"
    # What the halting unit reads at step t: block_output, the block's output h_t; step_input,
    # the block's input, the state plus this step's coordinates, as tensor2tensor's
    # dense(step_preprocess(state)) (universal_transformer_util.py:1093-1108).
    halting_input: str = "block_output"
    # The signal of the step number added before every step: sinusoidal (the paper's text) or
    # learned (tensor2tensor's default). See transformer_jax.layers.step_signals.
    step_signal: str = "sinusoidal"
    # Compile the steps unrolled instead of as one loop: the same functions, a longer compile.
    # XLA's cost analysis counts a loop's body once, so the TPU compiler's FLOPs and bytes of a
    # looped step are one step's: transformer_jax.aot counts on the unrolled step.
    unroll: bool = False

    def __post_init__(self):
        p = self.PREFIX
        F.check_choice(f"{p}.step_signal", self.step_signal, STEP_SIGNALS.names())
        F.check_bool(f"{p}.unroll", self.unroll)
        F.check_int(f"{p}.steps", self.steps, 0)
        F.check_bool(f"{p}.act", self.act)
        F.check_float(f"{p}.act_threshold_eps", self.act_threshold_eps, above=0.0, at_most=1.0)
        F.check_float(f"{p}.act_halting_bias_init", self.act_halting_bias_init)
        F.check_float(f"{p}.act_ponder_cost", self.act_ponder_cost, at_least=0.0)
        F.check_choice(f"{p}.act_halted", self.act_halted, ACT_HALTED)
        F.check_choice(f"{p}.halting_input", self.halting_input, HALTING_INPUTS)

    def num_steps(self, num_layers: int) -> int:
        """The (maximum) number of steps of a stack of `num_layers`."""
        return self.steps or num_layers


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """Vision Transformer (Dosovitskiy et al. 2021): square images cut into square,
    non-overlapping patches. Present exactly when model.family == "vit"."""

    PREFIX: ClassVar[str] = "model.vit"

    image_size: int = 32  # image height = width, in pixels
    num_channels: int = 3  # colour channels
    patch_size: int = 4  # patch height = width, in pixels; must divide image_size

    def __post_init__(self):
        p = self.PREFIX
        for name in ("image_size", "num_channels", "patch_size"):
            F.check_int(f"{p}.{name}", getattr(self, name), 1)
        if self.image_size % self.patch_size:
            raise ValueError(
                f"{p}.patch_size={self.patch_size} must divide {p}.image_size="
                f"{self.image_size}; valid patch sizes: {F.divisors(self.image_size)}"
            )

    @property
    def grid_size(self) -> int:
        """Patches per side, image_size / patch_size."""
        return self.image_size // self.patch_size

    @property
    def num_patches(self) -> int:
        return self.grid_size**2


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Every architectural switch of the models in `transformer_jax.models`, by concern."""

    PREFIX: ClassVar[str] = "model"

    family: str = "encoder_decoder"  # see transformer_jax.families
    vocab_size: int = 32  # token ids, the special ones (`tokens`) included
    num_classes: int = 0  # classifier families: size of the label set
    d_model: int = 128
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    dropout_rate: float = 0.1  # embeddings and residual branches (the paper's P_drop)
    pooling: str = "cls"  # classifier families: a prepended class token, or the mean
    dtype: str = "float32"  # compute dtype; parameters, softmax, logits and loss stay float32
    # Scale-out (no effect on the math): one nn.scan over identical layers (fast compiles of deep
    # stacks; parameters stacked under "layers"), and which activations each layer saves for
    # the backward pass: none (remat off), full (recompute everything), dots_saveable.
    scan_layers: bool = False
    remat: str = "none"

    attention: AttentionConfig = F.sub_config(AttentionConfig)
    positional: PositionalConfig = F.sub_config(PositionalConfig)
    norm: NormConfig = F.sub_config(NormConfig)
    ffn: FeedForwardConfig = F.sub_config(FeedForwardConfig)
    embeddings: EmbeddingConfig = F.sub_config(EmbeddingConfig)
    tokens: TokenConfig = F.sub_config(TokenConfig)
    universal: UniversalConfig | None = F.optional_sub_config(UniversalConfig)  # None: off
    vit: ViTConfig | None = F.optional_sub_config(ViTConfig)  # exactly when family == "vit"

    def __post_init__(self):
        family = FAMILIES[self.family]  # raises, naming the valid families
        F.check_choice("model.pooling", self.pooling, POOLINGS)
        F.check_choice("model.dtype", self.dtype, DTYPES)
        F.check_choice("model.remat", self.remat, REMATS)
        F.check_bool("model.scan_layers", self.scan_layers)
        F.check_int("model.d_model", self.d_model, 1)
        F.check_int("model.num_encoder_layers", self.num_encoder_layers, 0)
        F.check_int("model.num_decoder_layers", self.num_decoder_layers, 0)
        F.check_float("model.dropout_rate", self.dropout_rate, at_least=0.0, below=1.0)
        if not family.reads_images:  # a ViT reads pixels, not token ids
            F.check_int("model.vocab_size", self.vocab_size, 1)
            for name in ("pad_id", "bos_id", "eos_id"):
                if getattr(self.tokens, name) >= self.vocab_size:
                    raise ValueError(
                        f"model.tokens.{name}={getattr(self.tokens, name)} is not a token id "
                        f"of model.vocab_size={self.vocab_size}; valid: -1 (none) .. "
                        f"{self.vocab_size - 1}"
                    )
        if self.d_model % self.attention.num_heads:
            raise ValueError(
                f"model.d_model={self.d_model} must be divisible by model.attention.num_heads="
                f"{self.attention.num_heads}; valid num_heads: {F.divisors(self.d_model)}"
            )
        family.check(self)
        if (self.vit is None) == family.reads_images:
            raise ValueError(
                f"model.vit={self.vit!r} must be set exactly when model.family='vit' "
                f"(model.family={self.family!r})"
            )
        encoding(self.positional).check(self)
        if self.embeddings.norm and self.universal is not None:
            raise ValueError(
                "model.embeddings.norm=True is not implemented for a Universal Transformer "
                "(its positions are added at every step); valid: model.embeddings.norm=False"
            )
        if self.attention.impl == "splash" and (reason := splash_refusal(self)):
            raise ValueError(
                f"model.attention.impl='splash' cannot run this model: {reason}; valid: "
                "auto (the jax path where splash cannot run), jax, einsum"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.attention.num_heads

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any]) -> "ModelConfig":
        """From `config.model.to_dict()` or a run's config.json, rejecting unknown fields.

        `universal.enabled` switches the Universal Transformer on (False: universal is None);
        `vit` is kept for the vit family only. Flat configs written before the sub-configs
        (run directories up to commit 92893b4) are converted: see `upgrade_flat_model_config`.
        """
        fields = upgrade_flat_model_config(dict(fields))
        universal = fields.get("universal")
        if isinstance(universal, Mapping):
            universal = dict(universal)
            if not universal.pop("enabled", True):
                _check_unused("model.universal", universal, UniversalConfig, "enabled=True")
                universal = None
            fields["universal"] = universal
        if isinstance(fields.get("vit"), Mapping) and fields.get("family") != "vit":
            _check_unused("model.vit", fields["vit"], ViTConfig, "model.family='vit'", skip=-1)
            fields["vit"] = None
        return F.build(cls, fields, "model")

    def to_dict(self) -> dict:
        """The nested dictionary form, as written to config.json (from_dict reads it back)."""
        out = F.to_dict(self)
        if out["universal"] is not None:
            out["universal"] = {"enabled": True, **out["universal"]}
        return out

    def override(self, changes: Mapping[str, Any]) -> "ModelConfig":
        """A copy with dotted-path changes, the syntax of the command line and of sweep files:
        `config.override({"norm.kind": "dyt", "attention.scale": "none"})`.
        `universal.enabled` switches the Universal Transformer on or off, as there; setting
        another `universal.*` field switches it on."""
        changes = dict(changes)
        enabled = changes.pop("universal.enabled", None)
        config = self
        if enabled is not None:
            F.check_bool("model.universal.enabled", enabled)
            if not enabled and any(k.startswith("universal.") for k in changes):
                raise ValueError(
                    f"model.universal.* changes {sorted(changes)} have no effect with "
                    "model.universal.enabled=False"
                )
            config = self.replace(
                universal=(self.universal or UniversalConfig()) if enabled else None
            )
        return F.override(config, changes, "model")

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)


def _check_unused(prefix: str, values: Mapping, cls, needs: str, skip: int | None = None):
    """Fields of a switched-off sub-config must keep their defaults: a set value would be
    silently ignored otherwise. `skip`: a placeholder value (-1: from the data) also allowed."""
    defaults = F.to_dict(cls())
    for name, value in values.items():
        if name in defaults and value not in (defaults[name], skip):
            raise ValueError(
                f"{prefix}.{name}={value!r} has no effect unless {needs}; set it or leave "
                f"{prefix}.{name} at {defaults[name]!r}"
            )


# Flat model fields of run directories written before the sub-configs -> their new paths.
_FLAT_FIELDS = {
    "num_heads": "attention.num_heads",
    "num_kv_heads": "attention.num_kv_heads",
    "attention_scale": "attention.scale",
    "attention_temperature": "attention.temperature",
    "attention_impl": "attention.impl",
    "sliding_window": "attention.sliding_window",
    "num_global_tokens": "attention.num_global_tokens",
    "attention_dropout_rate": "attention.dropout_rate",
    "positional": "positional.kind",
    "rotary_base": "positional.base",
    "max_len": "positional.max_len",
    "norm": "norm.kind",
    "norm_position": "norm.position",
    "norm_epsilon": "norm.epsilon",
    "dyt_alpha_init": "norm.dyt_alpha_init",
    "dyt_learnable_alpha": "norm.dyt_learnable_alpha",
    "residual": "norm.residual",
    "activation": "ffn.activation",
    "d_ff": "ffn.d_ff",
    "scale_embeddings": "embeddings.scale",
    "tie_output_embeddings": "embeddings.tie_output",
    "share_source_target_embeddings": "embeddings.share_source_target",
    "universal": "universal.enabled",
    "ut_steps": "universal.steps",
    "act": "universal.act",
    "act_threshold_eps": "universal.act_threshold_eps",
    "act_halting_bias_init": "universal.act_halting_bias_init",
    "act_ponder_cost": "universal.act_ponder_cost",
    "act_halted": "universal.act_halted",
    "image_size": "vit.image_size",
    "num_channels": "vit.num_channels",
    "patch_size": "vit.patch_size",
}


def nested_key(key: str) -> str | None:
    """The current name of a config flag key naming a flat model field of commits up to
    92893b4 ("model.attention_scale" -> "model.attention.scale"); None for any other key."""
    head, _, name = key.partition(".")
    nested = _FLAT_FIELDS.get(name) if head == "model" else None
    return f"model.{nested}" if nested else None


def upgrade_flat_model_config(fields: dict) -> dict:
    """A model dict in the flat layout of commits up to 92893b4 -> the nested one (unchanged
    when already nested). The parameter trees are the same in both layouts, so old checkpoints
    load as they are."""
    if not any(isinstance(fields.get(k), bool | str | int | float) for k in ("norm", "universal")):
        return fields  # nested: norm and universal are sub-dicts (or universal is None)
    nested: dict[str, Any] = {}
    for name, value in fields.items():
        head, _, rest = _FLAT_FIELDS.get(name, name).partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            nested[head] = value
    if fields.get("family") != "vit":
        nested.pop("vit", None)
    return nested


def splash_refusal(config: ModelConfig) -> str | None:
    """Why the splash kernel (layers/splash.py), which takes its mask as segment ids and causal
    order and nothing else, cannot run `config`'s attention: the field and its value; None if
    it can."""
    attention = config.attention
    if type(encoding(config.positional)).logit_bias is not PositionalEncoding.logit_bias:
        return f"model.positional.kind={config.positional.kind!r} adds a logit bias"
    if attention.sliding_window:
        return f"model.attention.sliding_window={attention.sliding_window} is a window mask"
    if attention.dropout_rate:
        return f"model.attention.dropout_rate={attention.dropout_rate} drops attention weights"
    return None
