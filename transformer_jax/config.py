"""The typed model configuration: built once from `config.model`, validated before anything runs.

Layers never see the ml_collections ConfigDict; they receive this frozen dataclass. Every switch
that an ablation can turn is a field here, and `__post_init__` rejects bad values with a message
that names the field, the value and what would be valid.
"""

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

# The valid names of every switch; the layers' registries are keyed by the same strings.
FAMILIES = ("encoder_decoder", "decoder_only", "encoder_classifier", "vit")
CLASSIFIERS = ("encoder_classifier", "vit")  # families that map inputs to one label
ATTENTION_SCALES = ("sqrt_dk", "none", "constant", "learned")
ATTENTION_IMPLS = ("auto", "einsum", "jax")
POSITIONALS = ("sinusoidal", "learned", "rotary", "alibi", "none", "index")
NORMS = ("layernorm", "rmsnorm", "dyt", "batchnorm", "none")
NORM_POSITIONS = ("post", "pre")
ACTIVATIONS = ("relu", "gelu", "swiglu")
POOLINGS = ("cls", "mean")
DTYPES = ("float32", "bfloat16", "float16")
ACT_HALTED = ("freeze", "transform")  # What a halted position's state does in later steps.
REMATS = ("none", "full", "dots_saveable")  # see transformer_jax.models.stack


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Every architectural switch of the models in `transformer_jax.models`.

    Defaults follow the base Transformer of Vaswani et al. (2017) in its choices (post-norm
    LayerNorm, ReLU, sinusoidal positions, 1/sqrt(d_k), scaled and tied embeddings), at a size
    that trains on a laptop CPU.
    """

    family: str = "encoder_decoder"
    vocab_size: int = 32  # Token ids, including PAD=0, BOS=1, EOS=2.
    num_classes: int = 0  # encoder_classifier and vit: size of the label set.

    d_model: int = 128
    num_heads: int = 4
    num_kv_heads: int = 0  # 0: as many as num_heads. Fewer: grouped-query (1: multi-query).
    d_ff: int = 512
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    max_len: int = 256  # Longest sequence; sizes the learned position table.

    dropout_rate: float = 0.1  # Embeddings and residual branches (the paper's P_drop).
    attention_dropout_rate: float = 0.0  # On attention weights.

    # Attention: logits = q.k * scale (Vaswani §3.2.1; NCCU slides 31-33).
    attention_scale: str = "sqrt_dk"  # sqrt_dk: 1/sqrt(d_k); none: 1; constant: 1/tau;
    # learned: 1/tau_h with a learned tau per head, initialised to sqrt(d_k).
    attention_temperature: float = math.sqrt(9487)  # tau for `constant` (NCCU slide 33).
    # auto: einsum on CPUs (faster there), jax elsewhere; jax: jax.nn.dot_product_attention
    # (XLA or cuDNN kernels); einsum: the readable reference. The same math to rounding.
    attention_impl: str = "auto"
    sliding_window: int = 0  # 0: full attention; w >= 1: Longformer-style local window.
    num_global_tokens: int = 0  # Leading positions that attend and are attended everywhere.

    positional: str = "sinusoidal"
    rotary_base: float = 10000.0

    norm: str = "layernorm"
    norm_position: str = "post"  # post: Norm(x + F(x)) (the paper); pre: x + F(Norm(x)).
    norm_epsilon: float = 1e-6
    dyt_alpha_init: float = 0.5  # DyT's scalar alpha at initialisation (Zhu et al. 2025).
    dyt_learnable_alpha: bool = True  # False: alpha stays at dyt_alpha_init (the paper's ablation).
    residual: bool = True  # False removes every residual connection (NCCU ablation).

    activation: str = "relu"
    scale_embeddings: bool = True  # Multiply token embeddings by sqrt(d_model) (paper §3.4).
    tie_output_embeddings: bool = True  # Output projection = transposed token embedding.
    share_source_target_embeddings: bool = True  # One table for encoder and decoder tokens.
    pooling: str = "cls"  # encoder_classifier, vit: a prepended class token, or the mean.

    # vit only (Dosovitskiy et al. 2021): square images cut into square, non-overlapping patches.
    image_size: int = 32  # Image height = width, in pixels.
    num_channels: int = 3  # Colour channels of the images.
    patch_size: int = 4  # Patch height = width, in pixels; must divide image_size.

    dtype: str = "float32"  # Compute dtype; parameters, softmax, logits and loss stay float32.

    # Universal Transformer (Dehghani et al. 2019): every stack is ONE block applied recurrently
    # with shared weights, the position signal plus a sinusoidal signal of the step number
    # added before each step. See transformer_jax/models/universal.py.
    universal: bool = False
    ut_steps: int = 0  # Steps (fixed mode) or maximum steps (ACT); 0: the stack's layer count.
    # Adaptive Computation Time (Graves 2016) per position: halt once the summed halting
    # probabilities exceed 1 - act_threshold_eps; the output is the halting-weighted sum of
    # the states. Needs universal=True.
    act: bool = False
    act_threshold_eps: float = 0.01  # In (0, 1]; 1 makes every position halt after one step.
    # Halting unit p = sigmoid(W s + b), b initialised to this. tensor2tensor's +1 makes most
    # positions halt after about 2 steps at initialisation (papers.md); negative delays halting.
    act_halting_bias_init: float = -1.0
    act_ponder_cost: float = 0.01  # tau: the loss gains tau * mean(N + R) over real positions.
    # freeze: a halted position's state is copied unchanged to later steps (the paper);
    # transform: it keeps being transformed, as in tensor2tensor, so what the still-running
    # positions attend to differs; the halted position's own output is frozen either way.
    act_halted: str = "freeze"
    # Scale-out (no effect on the math): one nn.scan over identical layers (fast compiles of deep
    # stacks; parameters stacked under "layers" instead of layer_0, layer_1, ...), and which
    # activations each layer saves for the backward pass: none (remat off), full (recompute
    # everything), dots_saveable (keep matmul outputs, recompute the rest).
    scan_layers: bool = False
    remat: str = "none"

    def __post_init__(self):
        _check_choice("family", self.family, FAMILIES)
        _check_choice("attention_scale", self.attention_scale, ATTENTION_SCALES)
        _check_choice("attention_impl", self.attention_impl, ATTENTION_IMPLS)
        _check_choice("positional", self.positional, POSITIONALS)
        _check_choice("norm", self.norm, NORMS)
        _check_choice("norm_position", self.norm_position, NORM_POSITIONS)
        _check_choice("activation", self.activation, ACTIVATIONS)
        _check_choice("pooling", self.pooling, POOLINGS)
        _check_choice("dtype", self.dtype, DTYPES)
        _check_choice("act_halted", self.act_halted, ACT_HALTED)
        _check_choice("remat", self.remat, REMATS)
        if not isinstance(self.scan_layers, bool):
            raise ValueError(f"model.scan_layers={self.scan_layers!r} must be True or False")
        for name in ("d_model", "num_heads", "d_ff", "max_len"):
            _check_positive(name, getattr(self, name))
        if self.family != "vit":  # a ViT reads pixels, not token ids
            _check_positive("vocab_size", self.vocab_size)
        for name in ("num_encoder_layers", "num_decoder_layers", "num_kv_heads", "sliding_window"):
            _check_non_negative(name, getattr(self, name))
        if self.d_model % self.num_heads:
            raise ValueError(
                f"model.d_model={self.d_model} must be divisible by model.num_heads="
                f"{self.num_heads}; valid num_heads: {_divisors(self.d_model)}"
            )
        if self.num_kv_heads and self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"model.num_kv_heads={self.num_kv_heads} must divide model.num_heads="
                f"{self.num_heads}; valid: 0 (same as num_heads) or one of "
                f"{_divisors(self.num_heads)}"
            )
        if self.positional == "rotary" and self.head_dim % 2:
            raise ValueError(
                f"model.positional='rotary' rotates pairs of dimensions, so the head dimension "
                f"d_model/num_heads={self.head_dim} must be even"
            )
        if not 0.0 <= self.dropout_rate < 1.0:
            raise ValueError(f"model.dropout_rate={self.dropout_rate} must be in [0, 1)")
        if not 0.0 <= self.attention_dropout_rate < 1.0:
            raise ValueError(
                f"model.attention_dropout_rate={self.attention_dropout_rate} must be in [0, 1)"
            )
        if self.attention_scale == "constant" and self.attention_temperature <= 0:
            raise ValueError(
                f"model.attention_temperature={self.attention_temperature} must be > 0 "
                "when model.attention_scale='constant'"
            )
        _check_non_negative("num_global_tokens", self.num_global_tokens)
        if self.num_global_tokens and not self.sliding_window:
            raise ValueError(
                f"model.num_global_tokens={self.num_global_tokens} only has a meaning with "
                "sliding-window attention; set model.sliding_window >= 1 or use 0 global tokens"
            )
        if self.norm_epsilon <= 0:
            raise ValueError(f"model.norm_epsilon={self.norm_epsilon} must be > 0")
        if self.family == "encoder_decoder" and not (
            self.num_encoder_layers and self.num_decoder_layers
        ):
            raise ValueError(
                "model.family='encoder_decoder' needs num_encoder_layers >= 1 and "
                f"num_decoder_layers >= 1, got {self.num_encoder_layers} and "
                f"{self.num_decoder_layers}"
            )
        if self.family in CLASSIFIERS and self.num_classes < 2:
            raise ValueError(
                f"model.num_classes={self.num_classes} must be >= 2 for "
                f"model.family={self.family!r}"
            )
        if self.family == "vit":
            self._check_vit()
        self._check_universal()

    def _check_universal(self):
        _check_non_negative("ut_steps", self.ut_steps)
        if (self.act or self.ut_steps) and not self.universal:
            raise ValueError(
                f"model.act={self.act} and model.ut_steps={self.ut_steps} need "
                "model.universal=True; valid without it: act=False, ut_steps=0"
            )
        if not 0.0 < self.act_threshold_eps <= 1.0:
            raise ValueError(
                f"model.act_threshold_eps={self.act_threshold_eps} must be in (0, 1] "
                "(the halting threshold is 1 - eps)"
            )
        if self.act_ponder_cost < 0:
            raise ValueError(f"model.act_ponder_cost={self.act_ponder_cost} must be >= 0")
        if not math.isfinite(self.act_halting_bias_init):
            raise ValueError(
                f"model.act_halting_bias_init={self.act_halting_bias_init} must be finite"
            )

    def _check_vit(self):
        for name in ("image_size", "num_channels", "patch_size"):
            _check_positive(name, getattr(self, name))
        if self.image_size % self.patch_size:
            raise ValueError(
                f"model.patch_size={self.patch_size} must divide model.image_size="
                f"{self.image_size}; valid patch sizes: {_divisors(self.image_size)}"
            )
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ValueError(
                f"model.d_model={self.d_model} must be even for a vit with "
                "model.positional='sinusoidal' (half the features encode rows, half columns)"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    def steps(self, num_layers: int) -> int:
        """Universal Transformer: the (maximum) number of steps of a stack of `num_layers`."""
        return self.ut_steps or num_layers

    @property
    def num_patches(self) -> int:
        """vit: patches per image, (image_size / patch_size)^2."""
        return (self.image_size // self.patch_size) ** 2

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any]) -> "ModelConfig":
        """Builds the config from `config.model.to_dict()`, rejecting unknown fields."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ValueError(f"unknown model config field(s) {unknown}; valid: {sorted(known)}")
        return cls(**fields)

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)


def _check_choice(field: str, value, choices: tuple[str, ...]):
    if value not in choices:
        raise ValueError(f"model.{field}={value!r} is not valid; choose one of {list(choices)}")


def _check_positive(field: str, value: int):
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"model.{field}={value!r} must be an integer >= 1")


def _check_non_negative(field: str, value: int):
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"model.{field}={value!r} must be an integer >= 0")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
