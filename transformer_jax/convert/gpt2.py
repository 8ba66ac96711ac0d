"""GPT-2 (Hugging Face GPT2LMHeadModel) <-> the decoder_only family.

GPT-2 (Radford et al. 2019; transformers models/gpt2/modeling_gpt2.py) is a pre-norm decoder with
learned positions, LayerNorm with biases, the tanh GELU ("gelu_new"), biases on every dense
layer, a final LayerNorm (ln_f) and the output tied to the unscaled token embeddings. Its Conv1D
weights are stored (in, out), as flax's Dense kernels are, so the mapping reshapes and never
transposes, except the untied lm_head (an nn.Linear, (out, in)).

Shapes: V vocabulary, L positions, D = n_embd, N heads, H = D / N, F = n_inner (4 D).
"""

import numpy as np

from transformer_jax.config import ModelConfig
from transformer_jax.convert.huggingface import (
    Unsupported,
    check,
    check_all_read,
    layer_norm,
    layer_norm_tensors,
    take,
    token_config,
    token_fields,
)

ARCHITECTURES = ("GPT2LMHeadModel",)
# Hugging Face's activation names -> model.ffn.activation.
_ACTIVATIONS = {
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "gelu": "gelu_exact",
    "relu": "relu",
}
# Fields of a run's ModelConfig that a decoder_only model does not read.
IGNORED = (
    "num_encoder_layers",
    "pooling",
    "num_classes",
    "positional.base",
    "positional.eval_positions",
)
# Buffers older checkpoints store beside the weights: the causal mask and its fill value.
_BUFFERS = (".attn.bias", ".attn.masked_bias")
# GPT2Config's special token ids where config.json has none: <|endoftext|> is both BOS and EOS.
TOKEN_DEFAULTS = {"bos_token_id": 50256, "eos_token_id": 50256, "pad_token_id": None}


def model_config(hf: dict, architecture: str = ARCHITECTURES[0]) -> ModelConfig:
    """The ModelConfig of a GPT-2 config.json; Unsupported naming the first field it cannot
    express."""
    check("activation_function", hf.get("activation_function", "gelu_new"), tuple(_ACTIVATIONS))
    check("scale_attn_weights", hf.get("scale_attn_weights", True), (True,))
    check(
        "scale_attn_by_inverse_layer_idx", hf.get("scale_attn_by_inverse_layer_idx"), (False, None)
    )
    check("add_cross_attention", hf.get("add_cross_attention", False), (False,))
    residual = hf.get("resid_pdrop", 0.1)
    if hf.get("embd_pdrop", 0.1) != residual:
        raise Unsupported(
            f"embd_pdrop={hf.get('embd_pdrop')} differs from resid_pdrop={residual}: "
            "model.dropout_rate is one rate for both; not supported"
        )
    d_model = hf.get("n_embd", 768)
    return ModelConfig(
        family="decoder_only",
        vocab_size=hf.get("vocab_size", 50257),
        d_model=d_model,
        num_encoder_layers=0,
        num_decoder_layers=hf.get("n_layer", 12),
        dropout_rate=residual,
    ).override(
        {
            "attention.num_heads": hf.get("n_head", 12),
            "attention.dropout_rate": hf.get("attn_pdrop", 0.1),
            "positional.kind": "learned",
            "positional.max_len": hf.get("n_positions", 1024),
            "norm.kind": "layernorm",
            "norm.position": "pre",
            "norm.epsilon": hf.get("layer_norm_epsilon", 1e-5),
            "ffn.activation": _ACTIVATIONS[hf.get("activation_function", "gelu_new")],
            "ffn.d_ff": hf.get("n_inner") or 4 * d_model,
            "embeddings.scale": False,
            "embeddings.tie_output": hf.get("tie_word_embeddings", True),
            **token_fields(hf, TOKEN_DEFAULTS),
        }
    )


def hf_config(cfg: ModelConfig, original: dict, architecture: str = ARCHITECTURES[0]) -> dict:
    """GPT-2's config.json for `cfg`, over the fields of `original` it does not set (the
    caller checks that `model_config` of it gives `cfg` back)."""
    activation = original.get("activation_function")
    if _ACTIVATIONS.get(activation) != cfg.ffn.activation:
        names = {"gelu": "gelu_new", "gelu_exact": "gelu", "relu": "relu"}
        activation = names.get(cfg.ffn.activation, cfg.ffn.activation)
    return {
        **original,
        "architectures": list(ARCHITECTURES),
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.positional.max_len,
        "n_embd": cfg.d_model,
        "n_layer": cfg.num_decoder_layers,
        "n_head": cfg.attention.num_heads,
        "n_inner": cfg.ffn.d_ff,
        "activation_function": activation,
        "resid_pdrop": cfg.dropout_rate,
        "embd_pdrop": cfg.dropout_rate,
        "attn_pdrop": cfg.attention.dropout_rate,
        "layer_norm_epsilon": cfg.norm.epsilon,
        "tie_word_embeddings": cfg.embeddings.tie_output,
        **token_config(cfg.tokens, original, TOKEN_DEFAULTS),
    }


def to_params(
    tensors: dict[str, np.ndarray], cfg: ModelConfig, architecture: str = ARCHITECTURES[0]
) -> dict:
    """GPT2LMHeadModel's state dict -> the decoder_only parameter tree (float32)."""
    tensors = dict(tensors)
    v, d, f = cfg.vocab_size, cfg.d_model, cfg.ffn.d_ff
    n, h = cfg.attention.num_heads, cfg.head_dim
    decoder = {
        "positional": {
            "table": {
                "embedding": take(tensors, "transformer.wpe.weight", (cfg.positional.max_len, d))
            }
        },
        "final_norm": layer_norm(tensors, "transformer.ln_f", d),
    }
    for i in range(cfg.num_decoder_layers):
        p = f"transformer.h.{i}"
        qkv_w = take(tensors, f"{p}.attn.c_attn.weight", (d, 3 * d))  # (D, 3D): q, k, v
        qkv_b = take(tensors, f"{p}.attn.c_attn.bias", (3 * d,))
        attention = {
            name: {
                "kernel": qkv_w[:, j * d : (j + 1) * d].reshape(d, n, h),  # (D, N, H)
                "bias": qkv_b[j * d : (j + 1) * d].reshape(n, h),  # (N, H)
            }
            for j, name in enumerate(("query", "key", "value"))
        }
        attention["out"] = {
            "kernel": take(tensors, f"{p}.attn.c_proj.weight", (d, d)).reshape(
                n, h, d
            ),  # (N, H, D)
            "bias": take(tensors, f"{p}.attn.c_proj.bias", (d,)),
        }
        decoder[f"layer_{i}"] = {
            "norm_attention": layer_norm(tensors, f"{p}.ln_1", d),
            "self_attention": attention,
            "norm_ffn": layer_norm(tensors, f"{p}.ln_2", d),
            "ffn": {
                "wi": _dense(tensors, f"{p}.mlp.c_fc", d, f),  # (D, F)
                "wo": _dense(tensors, f"{p}.mlp.c_proj", f, d),  # (F, D)
            },
        }
    wte = take(tensors, "transformer.wte.weight", (v, d))  # (V, D)
    params = {"embedding": {"table": {"embedding": wte}}, "decoder": decoder}
    if cfg.embeddings.tie_output:
        # Saved tied, lm_head.weight is absent; some files store it anyway, equal to wte.
        head = tensors.pop("lm_head.weight", wte)
        if not np.array_equal(np.asarray(head, np.float32), wte):
            raise Unsupported(
                "lm_head.weight differs from transformer.wte.weight with tie_word_embeddings=True"
            )
    else:
        lm_head = take(tensors, "lm_head.weight", (v, d))  # nn.Linear: (V, D)
        params["output"] = {"logits": {"kernel": lm_head.T, "bias": np.zeros(v, np.float32)}}
    check_all_read(tensors, _BUFFERS)
    return params


def to_tensors(
    params: dict, cfg: ModelConfig, architecture: str = ARCHITECTURES[0]
) -> dict[str, np.ndarray]:
    """The inverse of `to_params`: the decoder_only parameter tree -> GPT2LMHeadModel's tensors
    (float32), lm_head.weight left out when tied (as transformers saves it)."""
    d = cfg.d_model
    decoder = params["decoder"]
    out = {
        "transformer.wte.weight": params["embedding"]["table"]["embedding"],
        "transformer.wpe.weight": decoder["positional"]["table"]["embedding"],
        **layer_norm_tensors(decoder["final_norm"], "transformer.ln_f"),
    }
    for i in range(cfg.num_decoder_layers):
        p, layer = f"transformer.h.{i}", decoder[f"layer_{i}"]
        attention = layer["self_attention"]
        names = ("query", "key", "value")
        out[f"{p}.attn.c_attn.weight"] = np.concatenate(
            [np.asarray(attention[name]["kernel"]).reshape(d, d) for name in names], axis=1
        )
        out[f"{p}.attn.c_attn.bias"] = np.concatenate(
            [np.asarray(attention[name]["bias"]).reshape(d) for name in names]
        )
        out[f"{p}.attn.c_proj.weight"] = np.asarray(attention["out"]["kernel"]).reshape(d, d)
        out[f"{p}.attn.c_proj.bias"] = attention["out"]["bias"]
        out.update(layer_norm_tensors(layer["norm_attention"], f"{p}.ln_1"))
        out.update(layer_norm_tensors(layer["norm_ffn"], f"{p}.ln_2"))
        for name, hf_name in (("wi", "c_fc"), ("wo", "c_proj")):
            out[f"{p}.mlp.{hf_name}.weight"] = layer["ffn"][name]["kernel"]
            out[f"{p}.mlp.{hf_name}.bias"] = layer["ffn"][name]["bias"]
    if not cfg.embeddings.tie_output:
        logits = params["output"]["logits"]
        if np.any(np.asarray(logits["bias"])):
            raise Unsupported("the output layer's bias is not zero: GPT-2's lm_head has none")
        out["lm_head.weight"] = np.asarray(logits["kernel"]).T
    return {name: np.asarray(x, np.float32) for name, x in out.items()}


def _dense(tensors, prefix: str, fan_in: int, fan_out: int) -> dict:
    """A Conv1D's weight (in, out) and bias (out,) -> a Dense kernel and bias, unchanged."""
    return {
        "kernel": take(tensors, f"{prefix}.weight", (fan_in, fan_out)),
        "bias": take(tensors, f"{prefix}.bias", (fan_out,)),
    }
