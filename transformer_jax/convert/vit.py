"""ViT (Hugging Face ViTForImageClassification, ViTModel) <-> the vit family.

Hugging Face's ViT (transformers models/vit/modeling_vit.py, Dosovitskiy et al. 2021) is a
pre-norm encoder: patches by a stride-p convolution, a class token, learned position embeddings
(one per patch and one for the class token), LayerNorm (epsilon 1e-12) with biases, the erf GELU
("gelu"), a final LayerNorm, and a linear classifier on the class token's state. nn.Linear
weights are (out, in), flax Dense kernels (in, out): every dense weight is transposed.

ViTModel has no classifier but a pooler, tanh(dense(class token state)); its dense layer becomes
the head (num_classes = its output size), so the run's head outputs are the pooler's before the
tanh, and a ViTModel saved without a pooler is refused.

Shapes: D hidden size, N heads, H = D / N, F intermediate size, C channels, p patch size,
M patches (+1: the class token), K classes.
"""

import numpy as np

from transformer_jax.config import ModelConfig
from transformer_jax.config.model import ViTConfig
from transformer_jax.convert.huggingface import (
    Unsupported,
    check,
    check_all_read,
    layer_norm,
    layer_norm_tensors,
    linear,
    linear_tensors,
    take,
)

ARCHITECTURES = ("ViTForImageClassification", "ViTModel")
_ACTIVATIONS = {
    "gelu": "gelu_exact",
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "relu": "relu",
}
# Fields of a run's ModelConfig that the vit family does not read.
IGNORED = ("vocab_size", "num_decoder_layers", "positional.base", "positional.eval_positions")


def _prefix(architecture: str) -> str:
    return "vit." if architecture == "ViTForImageClassification" else ""


def model_config(hf: dict, architecture: str) -> ModelConfig:
    """The ModelConfig of a ViT config.json; Unsupported naming the first field it cannot
    express."""
    activation = hf.get("hidden_act", "gelu")
    check("hidden_act", activation, tuple(_ACTIVATIONS))
    check("qkv_bias", hf.get("qkv_bias", True), (True,))
    d_model = hf.get("hidden_size", 768)
    if architecture == "ViTModel":
        check("pooler_act", hf.get("pooler_act", "tanh"), ("tanh",))
        num_classes = hf.get("pooler_output_size") or d_model
    else:
        labels = hf.get("id2label") or {}
        num_classes = hf.get("num_labels") or len(labels) or 2
    return ModelConfig(
        family="vit",
        num_classes=num_classes,
        d_model=d_model,
        num_encoder_layers=hf.get("num_hidden_layers", 12),
        num_decoder_layers=0,
        dropout_rate=hf.get("hidden_dropout_prob", 0.0),
        pooling="cls",
        vit=ViTConfig(
            image_size=hf.get("image_size", 224),
            num_channels=hf.get("num_channels", 3),
            patch_size=hf.get("patch_size", 16),
        ),
    ).override(
        {
            "attention.num_heads": hf.get("num_attention_heads", 12),
            "attention.dropout_rate": hf.get("attention_probs_dropout_prob", 0.0),
            "positional.kind": "learned",
            "positional.max_len": (hf.get("image_size", 224) // hf.get("patch_size", 16)) ** 2 + 1,
            "norm.kind": "layernorm",
            "norm.position": "pre",
            "norm.epsilon": hf.get("layer_norm_eps", 1e-12),
            "ffn.activation": _ACTIVATIONS[activation],
            "ffn.d_ff": hf.get("intermediate_size", 3072),
            "embeddings.scale": False,
        }
    )


def hf_config(cfg: ModelConfig, original: dict, architecture: str) -> dict:
    """ViT's config.json for `cfg`, over the fields of `original` it does not set (the caller
    checks that `model_config` of it gives `cfg` back)."""
    activation = original.get("hidden_act")
    if _ACTIVATIONS.get(activation) != cfg.ffn.activation:
        names = {"gelu_exact": "gelu", "gelu": "gelu_new", "relu": "relu"}
        activation = names.get(cfg.ffn.activation, cfg.ffn.activation)
    hf = {
        **original,
        "architectures": [architecture],
        "model_type": "vit",
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.num_encoder_layers,
        "num_attention_heads": cfg.attention.num_heads,
        "intermediate_size": cfg.ffn.d_ff,
        "hidden_act": activation,
        "hidden_dropout_prob": cfg.dropout_rate,
        "attention_probs_dropout_prob": cfg.attention.dropout_rate,
        "layer_norm_eps": cfg.norm.epsilon,
        "image_size": cfg.vit.image_size,
        "patch_size": cfg.vit.patch_size,
        "num_channels": cfg.vit.num_channels,
        "qkv_bias": True,
    }
    if architecture == "ViTModel":
        hf["pooler_output_size"] = cfg.num_classes
    else:
        labels = original.get("id2label") or {}
        if len(labels) != cfg.num_classes:
            labels = {str(k): f"LABEL_{k}" for k in range(cfg.num_classes)}
        hf["id2label"] = labels
        hf["label2id"] = {name: int(k) for k, name in labels.items()}
        hf.pop("num_labels", None)
    return hf


def to_params(tensors: dict[str, np.ndarray], cfg: ModelConfig, architecture: str) -> dict:
    """The state dict of `architecture` -> the vit parameter tree (float32)."""
    tensors = dict(tensors)
    v = _prefix(architecture)
    d, f, n, h = cfg.d_model, cfg.ffn.d_ff, cfg.attention.num_heads, cfg.head_dim
    c, p, m = cfg.vit.num_channels, cfg.vit.patch_size, cfg.vit.num_patches
    conv = take(tensors, f"{v}embeddings.patch_embeddings.projection.weight", (d, c, p, p))
    encoder = {"final_norm": layer_norm(tensors, f"{v}layernorm", d)}
    for i in range(cfg.num_encoder_layers):
        q = f"{v}encoder.layer.{i}"
        attention = {
            name: {
                "kernel": take(tensors, f"{q}.attention.attention.{name}.weight", (d, d)).T.reshape(
                    d, n, h
                ),  # (out, in) -> (D, N, H)
                "bias": take(tensors, f"{q}.attention.attention.{name}.bias", (d,)).reshape(n, h),
            }
            for name in ("query", "key", "value")
        }
        attention["out"] = {
            "kernel": take(tensors, f"{q}.attention.output.dense.weight", (d, d)).T.reshape(
                n, h, d
            ),
            "bias": take(tensors, f"{q}.attention.output.dense.bias", (d,)),
        }
        encoder[f"layer_{i}"] = {
            "norm_attention": layer_norm(tensors, f"{q}.layernorm_before", d),
            "self_attention": attention,
            "norm_ffn": layer_norm(tensors, f"{q}.layernorm_after", d),
            "ffn": {
                "wi": linear(tensors, f"{q}.intermediate.dense", d, f),  # (D, F)
                "wo": linear(tensors, f"{q}.output.dense", f, d),  # (F, D)
            },
        }
    head = "classifier" if architecture == "ViTForImageClassification" else "pooler.dense"
    if architecture == "ViTModel" and f"{head}.weight" not in tensors:
        raise Unsupported("a ViTModel without its pooler (add_pooling_layer=False); not supported")
    params = {
        # The convolution's (D, C, p, p) as a Dense on patches flattened (p, p, C): (p p C, D).
        "patch_embedding": {
            "kernel": conv.transpose(2, 3, 1, 0).reshape(p * p * c, d),
            "bias": take(tensors, f"{v}embeddings.patch_embeddings.projection.bias", (d,)),
        },
        "cls": take(tensors, f"{v}embeddings.cls_token", (1, 1, d)),  # (1, 1, D)
        # (1, M + 1, D) -> (M + 1, D): the class token's first, then the patches row-major.
        "position_embedding": take(tensors, f"{v}embeddings.position_embeddings", (1, m + 1, d))[0],
        "encoder": encoder,
        "head": linear(tensors, head, d, cfg.num_classes),  # (D, K)
    }
    check_all_read(tensors)
    return params


def to_tensors(params: dict, cfg: ModelConfig, architecture: str) -> dict[str, np.ndarray]:
    """The inverse of `to_params` (float32 tensors)."""
    v = _prefix(architecture)
    d, c, p = cfg.d_model, cfg.vit.num_channels, cfg.vit.patch_size
    encoder = params["encoder"]
    kernel = np.asarray(params["patch_embedding"]["kernel"])
    out = {
        f"{v}embeddings.patch_embeddings.projection.weight": kernel.reshape(p, p, c, d).transpose(
            3, 2, 0, 1
        ),
        f"{v}embeddings.patch_embeddings.projection.bias": params["patch_embedding"]["bias"],
        f"{v}embeddings.cls_token": params["cls"],
        f"{v}embeddings.position_embeddings": np.asarray(params["position_embedding"])[None],
        **layer_norm_tensors(encoder["final_norm"], f"{v}layernorm"),
    }
    for i in range(cfg.num_encoder_layers):
        q, layer = f"{v}encoder.layer.{i}", encoder[f"layer_{i}"]
        attention = layer["self_attention"]
        for name in ("query", "key", "value"):
            out[f"{q}.attention.attention.{name}.weight"] = (
                np.asarray(attention[name]["kernel"]).reshape(d, d).T
            )
            out[f"{q}.attention.attention.{name}.bias"] = np.asarray(
                attention[name]["bias"]
            ).reshape(d)
        out[f"{q}.attention.output.dense.weight"] = (
            np.asarray(attention["out"]["kernel"]).reshape(d, d).T
        )
        out[f"{q}.attention.output.dense.bias"] = attention["out"]["bias"]
        out.update(layer_norm_tensors(layer["norm_attention"], f"{q}.layernorm_before"))
        out.update(layer_norm_tensors(layer["norm_ffn"], f"{q}.layernorm_after"))
        out.update(linear_tensors(layer["ffn"]["wi"], f"{q}.intermediate.dense"))
        out.update(linear_tensors(layer["ffn"]["wo"], f"{q}.output.dense"))
    head = "classifier" if architecture == "ViTForImageClassification" else "pooler.dense"
    out.update(linear_tensors(params["head"], head))
    return {name: np.asarray(x, np.float32) for name, x in out.items()}
