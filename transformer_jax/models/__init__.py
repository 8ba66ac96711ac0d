"""Model families, built from a `ModelConfig` by `build_model`."""

from transformer_jax.config import ModelConfig
from transformer_jax.models.classifier import EncoderClassifier
from transformer_jax.models.decoder_only import DecoderOnly
from transformer_jax.models.encoder_decoder import EncoderDecoder
from transformer_jax.models.vit import ViT

MODELS = {
    "encoder_decoder": EncoderDecoder,
    "decoder_only": DecoderOnly,
    "encoder_classifier": EncoderClassifier,
    "vit": ViT,
}


def build_model(config: ModelConfig):
    """The flax module of `config.family`."""
    if config.family not in MODELS:
        raise ValueError(
            f"model.family={config.family!r} is not valid; choose one of {list(MODELS)}"
        )
    return MODELS[config.family](config)


__all__ = ["MODELS", "DecoderOnly", "EncoderClassifier", "EncoderDecoder", "ViT", "build_model"]
