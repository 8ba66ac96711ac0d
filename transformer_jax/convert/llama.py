"""Llama (Hugging Face LlamaForCausalLM) <-> the decoder_only family.

Llama (Touvron et al. 2023; transformers models/llama/modeling_llama.py) is a pre-norm decoder
with RMSNorm, rotary positions (rope_theta), grouped-query attention (num_key_value_heads), a
SwiGLU feed-forward network, no biases (attention_bias, mlp_bias), a final RMSNorm and an
untied lm_head without a bias (tie_word_embeddings=True ties it). nn.Linear weights are
(out, in), flax Dense kernels (in, out): every dense weight is transposed.

Rotary layout: Hugging Face rotates the pairs (j, j + H/2) of a head ("rotate_half"), this
project the pairs (2i, 2i + 1) (layers/positional.py `apply_rotary`), both pair i by the angle
m base^(-2i/H). So each head's query and key features are permuted, HF feature i to position 2i
and i + H/2 to 2i + 1: q.k is unchanged by a permutation applied to both, the logits are
the same.

Shapes: V vocabulary, D hidden size, N query heads, K key-value heads, H = D / N head
dimension, F intermediate size.
"""

import numpy as np

from transformer_jax.config import ModelConfig
from transformer_jax.convert.huggingface import (
    Unsupported,
    check,
    check_all_read,
    linear,
    linear_tensors,
    take,
    token_config,
    token_fields,
)

ARCHITECTURES = ("LlamaForCausalLM",)
# Fields of a run's ModelConfig that a decoder_only model does not read.
IGNORED = ("num_encoder_layers", "pooling", "num_classes", "positional.eval_positions")
# Buffers older checkpoints store beside the weights.
_BUFFERS = (".rotary_emb.inv_freq",)
# LlamaConfig's special token ids where config.json has none.
TOKEN_DEFAULTS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None}


def rope_theta(hf: dict) -> float:
    """rope_theta from transformers v5's rope_parameters or the older top-level field; only the
    unscaled ("default") rotary is supported."""
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    check("rope_parameters.rope_type", kind, ("default",))
    return float(rope.get("rope_theta", hf.get("rope_theta", 10000.0)))


def model_config(hf: dict, architecture: str = ARCHITECTURES[0]) -> ModelConfig:
    """The ModelConfig of a Llama config.json; Unsupported naming the first field it cannot
    express."""
    check("hidden_act", hf.get("hidden_act", "silu"), ("silu",))
    check("pretraining_tp", hf.get("pretraining_tp", 1), (1,))
    d_model, heads = hf.get("hidden_size", 4096), hf.get("num_attention_heads", 32)
    head_dim = hf.get("head_dim") or d_model // heads
    if head_dim * heads != d_model:
        raise Unsupported(
            f"head_dim={head_dim} with num_attention_heads={heads} is not hidden_size="
            f"{d_model} / num_attention_heads; not supported (the head dimension is "
            "d_model / num_heads here)"
        )
    kv_heads = hf.get("num_key_value_heads") or heads
    return ModelConfig(
        family="decoder_only",
        vocab_size=hf.get("vocab_size", 32000),
        d_model=d_model,
        num_encoder_layers=0,
        num_decoder_layers=hf.get("num_hidden_layers", 32),
        dropout_rate=0.0,
    ).override(
        {
            "attention.num_heads": heads,
            "attention.num_kv_heads": 0 if kv_heads == heads else kv_heads,
            "attention.dropout_rate": hf.get("attention_dropout", 0.0),
            "attention.use_bias": hf.get("attention_bias", False),
            "positional.kind": "rotary",
            "positional.base": rope_theta(hf),
            "positional.max_len": hf.get("max_position_embeddings", 2048),
            "norm.kind": "rmsnorm",
            "norm.position": "pre",
            "norm.epsilon": hf.get("rms_norm_eps", 1e-6),
            "ffn.activation": "swiglu",
            "ffn.d_ff": hf.get("intermediate_size", 11008),
            "ffn.use_bias": hf.get("mlp_bias", False),
            "embeddings.scale": False,
            "embeddings.tie_output": hf.get("tie_word_embeddings", False),
            "embeddings.output_bias": "never",
            **token_fields(hf, TOKEN_DEFAULTS),
        }
    )


def hf_config(cfg: ModelConfig, original: dict, architecture: str = ARCHITECTURES[0]) -> dict:
    """Llama's config.json for `cfg`, over the fields of `original` it does not set (the caller
    checks that `model_config` of it gives `cfg` back)."""
    hf = {
        **original,
        "architectures": list(ARCHITECTURES),
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.num_decoder_layers,
        "num_attention_heads": cfg.attention.num_heads,
        "num_key_value_heads": cfg.attention.kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.ffn.d_ff,
        "hidden_act": "silu" if cfg.ffn.activation == "swiglu" else cfg.ffn.activation,
        "max_position_embeddings": cfg.positional.max_len,
        "rms_norm_eps": cfg.norm.epsilon,
        "attention_bias": cfg.attention.use_bias,
        "attention_dropout": cfg.attention.dropout_rate,
        "mlp_bias": cfg.ffn.use_bias,
        "tie_word_embeddings": cfg.embeddings.tie_output,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.positional.base},
        **token_config(cfg.tokens, original, TOKEN_DEFAULTS),
    }
    hf.pop("rope_theta", None)
    hf.pop("rope_scaling", None)
    return hf


def rotary_permutation(head_dim: int) -> np.ndarray:
    """(H,) indices: this project's feature k of a head is Hugging Face's feature perm[k]."""
    half = np.arange(head_dim // 2)
    return np.stack([half, half + head_dim // 2], axis=-1).reshape(-1)


def to_params(
    tensors: dict[str, np.ndarray], cfg: ModelConfig, architecture: str = ARCHITECTURES[0]
) -> dict:
    """LlamaForCausalLM's state dict -> the decoder_only parameter tree (float32)."""
    tensors = dict(tensors)
    v, d, f = cfg.vocab_size, cfg.d_model, cfg.ffn.d_ff
    n, k, h = cfg.attention.num_heads, cfg.attention.kv_heads, cfg.head_dim
    perm = rotary_permutation(h)
    bias = cfg.attention.use_bias
    decoder = {"final_norm": _rms(tensors, "model.norm", d)}
    for i in range(cfg.num_decoder_layers):
        p = f"model.layers.{i}"
        attention = {}
        for name, hf_name, heads, rotated in (
            ("query", "q_proj", n, True),
            ("key", "k_proj", k, True),
            ("value", "v_proj", k, False),
        ):
            dense = linear(tensors, f"{p}.self_attn.{hf_name}", d, heads * h, bias)
            kernel = dense["kernel"].reshape(d, heads, h)  # (D, heads, H)
            dense["kernel"] = kernel[..., perm] if rotated else kernel
            if bias:
                dense["bias"] = dense["bias"].reshape(heads, h)[
                    ..., perm if rotated else slice(None)
                ]
            attention[name] = dense
        out = linear(tensors, f"{p}.self_attn.o_proj", n * h, d, bias)
        out["kernel"] = out["kernel"].reshape(n, h, d)  # (N, H, D)
        attention["out"] = out
        mlp_bias = cfg.ffn.use_bias
        decoder[f"layer_{i}"] = {
            "norm_attention": _rms(tensors, f"{p}.input_layernorm", d),
            "self_attention": attention,
            "norm_ffn": _rms(tensors, f"{p}.post_attention_layernorm", d),
            "ffn": {  # down(silu(gate x) * up x) = wo(silu(wi x) * wg x)
                "wi": linear(tensors, f"{p}.mlp.gate_proj", d, f, mlp_bias),  # (D, F)
                "wg": linear(tensors, f"{p}.mlp.up_proj", d, f, mlp_bias),  # (D, F)
                "wo": linear(tensors, f"{p}.mlp.down_proj", f, d, mlp_bias),  # (F, D)
            },
        }
    table = take(tensors, "model.embed_tokens.weight", (v, d))  # (V, D)
    params = {"embedding": {"table": {"embedding": table}}, "decoder": decoder}
    if cfg.embeddings.tie_output:
        head = tensors.pop("lm_head.weight", table)
        if not np.array_equal(np.asarray(head, np.float32), table):
            raise Unsupported(
                "lm_head.weight differs from model.embed_tokens.weight with "
                "tie_word_embeddings=True"
            )
    else:
        params["output"] = {"logits": linear(tensors, "lm_head", d, v, bias=False)}  # (D, V)
    check_all_read(tensors, _BUFFERS)
    return params


def to_tensors(
    params: dict, cfg: ModelConfig, architecture: str = ARCHITECTURES[0]
) -> dict[str, np.ndarray]:
    """The inverse of `to_params` (float32 tensors; lm_head.weight left out when tied)."""
    d, h = cfg.d_model, cfg.head_dim
    unperm = np.argsort(rotary_permutation(h))
    decoder = params["decoder"]
    out = {
        "model.embed_tokens.weight": params["embedding"]["table"]["embedding"],
        "model.norm.weight": decoder["final_norm"]["norm"]["scale"],
    }
    for i in range(cfg.num_decoder_layers):
        p, layer = f"model.layers.{i}", decoder[f"layer_{i}"]
        attention = layer["self_attention"]
        for name, hf_name, rotated in (
            ("query", "q_proj", True),
            ("key", "k_proj", True),
            ("value", "v_proj", False),
        ):
            dense = dict(attention[name])
            order = unperm if rotated else slice(None)
            kernel = np.asarray(dense["kernel"])[..., order]  # (D, heads, H)
            dense["kernel"] = kernel.reshape(d, -1)
            if "bias" in dense:
                dense["bias"] = np.asarray(dense["bias"])[..., order].reshape(-1)
            out.update(linear_tensors(dense, f"{p}.self_attn.{hf_name}"))
        o = dict(attention["out"])
        o["kernel"] = np.asarray(o["kernel"]).reshape(-1, d)
        out.update(linear_tensors(o, f"{p}.self_attn.o_proj"))
        out[f"{p}.input_layernorm.weight"] = layer["norm_attention"]["norm"]["scale"]
        out[f"{p}.post_attention_layernorm.weight"] = layer["norm_ffn"]["norm"]["scale"]
        for name, hf_name in (("wi", "gate_proj"), ("wg", "up_proj"), ("wo", "down_proj")):
            out.update(linear_tensors(layer["ffn"][name], f"{p}.mlp.{hf_name}"))
    if not cfg.embeddings.tie_output:
        out.update(linear_tensors(params["output"]["logits"], "lm_head"))
    return {name: np.asarray(x, np.float32) for name, x in out.items()}


def _rms(tensors, prefix: str, d: int) -> dict:
    """An RMSNorm's weight (D,) -> the project's norm/scale."""
    return {"norm": {"scale": take(tensors, f"{prefix}.weight", (d,))}}
