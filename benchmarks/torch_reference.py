"""The decoder-only model of transformer_jax written in plain PyTorch eager, for speed comparisons.

Same architecture, parameter shapes, initial weights (copied from the JAX parameters), loss,
optimizer and learning rates as `transformer_jax`, so that `benchmarks/train_speed.py --torch`
compares two implementations of one computation, not two models. Attention uses
`F.scaled_dot_product_attention` (PyTorch's fused kernels), as a PyTorch user would write it.

PyTorch is a benchmark-only dependency: `pip install -r requirements-bench.txt`. Only the
configurations a GPT-style model needs are covered; anything else raises a ValueError naming the
(dotted) field.
"""

import math

import jax
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from transformer_jax.config import ModelConfig, TrainConfig
from transformer_jax.train.optimizer import make_schedule

# Dotted model fields (as on the command line) -> the values the PyTorch model implements.
SUPPORTED = {
    "family": ("decoder_only",),
    "positional.kind": ("learned", "sinusoidal", "none"),
    "norm.kind": ("layernorm", "rmsnorm"),
    "norm.residual": (True,),
    "attention.scale": ("sqrt_dk",),
    "attention.sliding_window": (0,),
    "universal": (None,),  # None: the Universal Transformer is off
}


def _field(cfg: ModelConfig, path: str):
    for name in path.split("."):
        cfg = getattr(cfg, name)
    return cfg


def check_supported(cfg: ModelConfig) -> None:
    for field, valid in SUPPORTED.items():
        value = _field(cfg, field)
        if value not in valid:
            raise ValueError(
                f"model.{field}={value!r} has no PyTorch reference; valid: {list(valid)}"
            )


def _norm(cfg: ModelConfig) -> nn.Module:
    if cfg.norm.kind == "rmsnorm":
        return nn.RMSNorm(cfg.d_model, eps=cfg.norm.epsilon)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm.epsilon)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        heads, kv_heads = cfg.attention.num_heads, cfg.attention.kv_heads
        inner, kv_inner = heads * cfg.head_dim, kv_heads * cfg.head_dim
        self.query = nn.Linear(cfg.d_model, inner)
        self.key = nn.Linear(cfg.d_model, kv_inner)
        self.value = nn.Linear(cfg.d_model, kv_inner)
        self.out = nn.Linear(inner, cfg.d_model)

    def forward(self, x_BTD):
        cfg, (batch, length, _) = self.cfg, x_BTD.shape

        def heads(x, n):  # (B, T, n * H) -> (B, n, T, H)
            return x.view(batch, length, n, cfg.head_dim).transpose(1, 2)

        attention = cfg.attention
        q = heads(self.query(x_BTD), attention.num_heads)
        k = heads(self.key(x_BTD), attention.kv_heads)
        v = heads(self.value(x_BTD), attention.kv_heads)
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            is_causal=True,
            dropout_p=attention.dropout_rate if self.training else 0.0,
            enable_gqa=attention.kv_heads != attention.num_heads,
        )
        return self.out(out.transpose(1, 2).reshape(batch, length, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.activation, d_ff = cfg.ffn.activation, cfg.ffn.d_ff
        self.wi = nn.Linear(cfg.d_model, d_ff)
        if self.activation == "swiglu":
            self.wg = nn.Linear(cfg.d_model, d_ff)
        self.wo = nn.Linear(d_ff, cfg.d_model)

    def forward(self, x):
        h = self.wi(x)
        if self.activation == "swiglu":
            h = F.silu(h) * self.wg(x)
        elif self.activation == "gelu":
            h = F.gelu(h, approximate="tanh")  # flax's nn.gelu default.
        else:
            h = F.relu(h)
        return self.wo(h)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pre = cfg.norm.position == "pre"
        self.norm_attention, self.norm_ffn = _norm(cfg), _norm(cfg)
        self.self_attention, self.ffn = Attention(cfg), FeedForward(cfg)
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def forward(self, x):
        for norm, sublayer in (
            (self.norm_attention, self.self_attention),
            (self.norm_ffn, self.ffn),
        ):
            if self.pre:
                x = x + self.dropout(sublayer(norm(x)))
            else:
                x = norm(x + self.dropout(sublayer(x)))
        return x


class DecoderOnly(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        check_supported(cfg)
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        positional = cfg.positional
        if positional.kind == "learned":
            self.positional = nn.Embedding(positional.max_len, cfg.d_model)
        elif positional.kind == "sinusoidal":
            from transformer_jax.layers.positional import sinusoidal_table

            table = sinusoidal_table(positional.max_len, cfg.d_model, positional.base)
            table = torch.from_numpy(table)
            self.register_buffer("sinusoidal", table, persistent=False)
        self.dropout = nn.Dropout(cfg.dropout_rate)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_decoder_layers))
        self.final_norm = _norm(cfg) if cfg.norm.position == "pre" else None
        if not cfg.embeddings.tie_output:
            self.output = nn.Linear(cfg.d_model, cfg.vocab_size)

    def forward(self, ids_BT):
        cfg, length = self.cfg, ids_BT.shape[1]
        x = self.embedding(ids_BT)
        if cfg.embeddings.scale:
            x = x * math.sqrt(cfg.d_model)
        if cfg.positional.kind == "learned":
            x = x + self.positional.weight[:length]
        elif cfg.positional.kind == "sinusoidal":
            x = x + self.sinusoidal[:length]
        x = self.dropout(x)
        for layer in self.layers:
            x = layer(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
        if cfg.embeddings.tie_output:
            return x @ self.embedding.weight.T
        return self.output(x)


def _flatten(tree, prefix=()):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _flatten(value, (*prefix, key))
        else:
            yield (*prefix, key), np.asarray(value)


def torch_name(path: tuple[str, ...]) -> str:
    """The PyTorch parameter name of a JAX parameter path, e.g.
    ("decoder", "layer_0", "ffn", "wi", "kernel") -> "layers.0.ffn.wi.weight"."""
    *modules, leaf = path
    names = []
    for key in modules:
        if key.startswith("layer_"):
            names += ["layers", key.removeprefix("layer_")]
        elif key not in ("decoder", "table", "norm", "logits"):  # flax-only wrapper modules.
            names.append(key)
    names.append("bias" if leaf == "bias" else "weight")  # kernel, scale, embedding: weight.
    return ".".join(names)


def load_jax_params(model: DecoderOnly, params) -> None:
    """Copies JAX parameters into the PyTorch model: kernels (in, ..., out) become (out, in)."""
    state = model.state_dict()
    loaded = set()
    for path, value in _flatten(params):
        name = torch_name(path)
        if name not in state:
            raise KeyError(f"JAX parameter {'/'.join(path)} has no PyTorch counterpart {name!r}")
        if path[-1] == "kernel":
            is_out = path[-2] == "out"  # (N, H, D): the heads are the input axes.
            value = (
                value.reshape(-1, value.shape[-1]) if is_out else value.reshape(value.shape[0], -1)
            )
            value = value.T
        elif value.ndim == 2 and path[-1] == "bias":  # (N, H) head biases.
            value = value.reshape(-1)
        if tuple(state[name].shape) != value.shape:
            raise ValueError(f"{name}: PyTorch shape {tuple(state[name].shape)} != {value.shape}")
        state[name] = torch.from_numpy(np.array(value))
        loaded.add(name)
    missing = set(state) - loaded
    if missing:
        raise KeyError(f"PyTorch parameters not set from JAX: {sorted(missing)}")
    model.load_state_dict(state)


def make_optimizer(model: DecoderOnly, train_config: TrainConfig) -> torch.optim.Optimizer:
    """Adam / AdamW with the config's betas, eps and decay (not on biases and norm scales, as
    `transformer_jax.train.optimizer.decay_mask`), PyTorch's default implementation."""
    name = train_config.optimizer
    if name not in ("adam", "adamw"):
        raise ValueError(f"train.optimizer={name!r} has no PyTorch reference; valid: adam, adamw")
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    weight_decay = train_config.weight_decay if name == "adamw" else 0.0
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    betas, eps = (train_config.b1, train_config.b2), train_config.eps
    # optax's adamw scales the decay by the learning rate, as torch.optim.AdamW does.
    return torch.optim.AdamW(groups, lr=train_config.learning_rate, betas=betas, eps=eps)


def make_train_step(model: DecoderOnly, optimizer, train_config: TrainConfig):
    """`step(inputs, targets) -> loss`: forward, cross-entropy, backward, clipping, update.

    Update i uses the rate of the JAX schedule at i (computed once here), so both frameworks
    follow one curve.
    """
    schedule = make_schedule(train_config, model.cfg.d_model)
    learning_rates = np.asarray(jax.vmap(schedule)(np.arange(train_config.steps)))
    clip = train_config.grad_clip_norm
    count = 0
    # The model's PAD is no target, as in the JAX loss; without one, -100 (no id) ignores none.
    pad = model.cfg.tokens.pad
    ignored = -100 if pad is None else pad

    def step(inputs_BT, targets_BT):
        nonlocal count
        for group in optimizer.param_groups:
            group["lr"] = float(learning_rates[min(count, len(learning_rates) - 1)])
        logits = model(inputs_BT)
        loss = F.cross_entropy(
            logits.flatten(0, 1).float(), targets_BT.flatten(), ignore_index=ignored
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        count += 1
        return loss

    return step
