"""Model families' flax modules, built from a `ModelConfig` by `build_model`.

What a family reads, predicts and is checked for is its `Family` in `transformer_jax.families`;
its flax module is registered here under the same name.
"""

import flax.linen as nn

from transformer_jax.families import FAMILIES, Family, family_of
from transformer_jax.models.classifier import EncoderClassifier
from transformer_jax.models.decoder_only import DecoderOnly
from transformer_jax.models.encoder_decoder import EncoderDecoder
from transformer_jax.models.vit import ViT
from transformer_jax.registry import Registry

MODULES: Registry[type[nn.Module]] = Registry("model.family")
MODULES.add("encoder_decoder", EncoderDecoder)
MODULES.add("decoder_only", DecoderOnly)
MODULES.add("encoder_classifier", EncoderClassifier)
MODULES.add("vit", ViT)


def build_model(config) -> nn.Module:
    """The flax module of `config.family`."""
    return MODULES[config.family](config)


__all__ = ["FAMILIES", "MODULES", "Family", "build_model", "family_of"]
