"""Model families: what each model reads, predicts and is scored on, in one registered object.

`FAMILIES[config.family]` tells the config, the trainer, the decoder and the analysis commands
everything they need to know about a family: the dataset kind it trains on, how a batch becomes
the module's arguments (teacher forcing for decoders), its targets and accuracy metric, the
longest sequence it must hold positions for, whether and how it decodes, and the configs it
rejects. Its flax module is registered under the same name in `transformer_jax.models`
(`MODULES`): the models import the config, which checks the family, so the family cannot
import the models. A new family is a module registered there plus one `Family` here.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from transformer_jax.registry import Registry
from transformer_jax.tokens import TokenConfig

FAMILIES: Registry["Family"] = Registry("model.family")


def shift_right(targets_BT, segment_ids_BT=None, *, tokens: TokenConfig):
    """Teacher forcing: the decoder reads BOS, y_1, ..., y_{T-1} (NTHU slides 55-56).

    `tokens` (the model's `model.tokens`) names BOS and PAD; it must have a BOS. With packed
    documents each document starts again from BOS.
    """
    bos = tokens.bos
    if bos is None:
        raise ValueError("shift_right needs a BOS to read first; model.tokens.bos_id=-1 (none)")
    shifted_BT = jnp.pad(targets_BT, ((0, 0), (1, 0)), constant_values=bos)[:, :-1]
    if segment_ids_BT is not None:
        starts_BT = jnp.pad(segment_ids_BT, ((0, 0), (1, 0)))[:, :-1] != segment_ids_BT
        shifted_BT = jnp.where(starts_BT & (segment_ids_BT > 0), bos, shifted_BT)
    if tokens.pad is None:  # nothing is padding
        return shifted_BT
    # Keep padding as padding: positions after the sequence ends read PAD, not the last token.
    pad_BT = jnp.where(shifted_BT == bos, bos, tokens.pad)
    return jnp.where(targets_BT == tokens.pad, pad_BT, shifted_BT)


def _all_but_last(x_BT):
    return None if x_BT is None else x_BT[:, :-1]


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family. `decodes` is how generation feeds it: "source" (an encoder reads the
    input, the decoder starts from BOS), "prompt" (the decoder continues the input) or None."""

    name: str
    data_kind: str  # the DatasetInfo.kind it trains on: seq2seq | lm | classification
    reads_images: bool = False
    decodes: str | None = None
    # model.config -> None or ValueError: the checks that only this family needs.
    extra_check: Callable[[Any], None] = lambda config: None

    @property
    def classifier(self) -> bool:
        """One label per example (accuracy of labels) instead of one per token."""
        return self.data_kind == "classification"

    @property
    def accuracy_name(self) -> str:
        return "accuracy" if self.classifier else "token_accuracy"

    def inputs(self, batch, tokens: TokenConfig) -> tuple[tuple, dict]:
        """The positional and keyword arguments of the module's __call__ for a batch.

        `tokens`: the model's `model.tokens` (its BOS and PAD). Without a BOS a decoder-only
        model reads y_1, ..., y_{T-1} and predicts y_2, ..., y_T (`targets`), as it decodes:
        from the prompt's first token, nothing before it.
        """
        if self.classifier:
            return (batch["inputs"],), {}
        segments_BT = batch.get("targets_segment_ids")
        positions_BT = batch.get("targets_positions")
        if tokens.bos is None:  # decoder-only (an encoder-decoder needs a BOS: check)
            decoder_inputs_BT = batch["targets"][:, :-1]
            segments_BT, positions_BT = _all_but_last(segments_BT), _all_but_last(positions_BT)
        else:
            decoder_inputs_BT = shift_right(batch["targets"], segments_BT, tokens=tokens)
        if self.decodes == "source":
            return (batch["inputs"], decoder_inputs_BT), {}
        return (decoder_inputs_BT,), {"segment_ids_BT": segments_BT, "positions_BT": positions_BT}

    def targets(self, batch, tokens: TokenConfig):
        """What the logits of `inputs` predict, (B, T') int, and their loss weights (B, T')
        float32: the tokens that are not `tokens`' PAD (all of them without a PAD id), of real
        examples (`example_weights`), and where the batch has "targets_weights", of those.
        Without a BOS, T' = T - 1: a sequence's first token (a packed document's too) is read,
        never predicted."""
        targets_BT = batch["targets"]
        weights_BT = tokens.valid(targets_BT).astype(jnp.float32)
        weights_BT = weights_BT * batch["example_weights"][:, None]
        if "targets_weights" in batch:  # a prompt's answer only (data.layout="prompt")
            weights_BT = weights_BT * batch["targets_weights"]
        if tokens.bos is None:
            targets_BT, weights_BT = targets_BT[:, 1:], weights_BT[:, 1:]
            segments_BT = batch.get("targets_segment_ids")
            if segments_BT is not None:  # a document's first token follows another document
                weights_BT = weights_BT * (segments_BT[:, 1:] == segments_BT[:, :-1])
        return targets_BT, weights_BT

    def example_batch(self, config) -> dict[str, jnp.ndarray]:
        """One example of zeros in the shapes `inputs` reads, for `config`: enough to build the
        parameters of a trained run without its data."""
        if self.reads_images:
            size, channels = config.vit.image_size, config.vit.num_channels
            return {"inputs": jnp.zeros((1, size, size, channels), jnp.float32)}
        # The longest sequence the positions allow (less a classifier's class token).
        length = config.positional.max_len - (self.classifier and config.pooling == "cls")
        tokens_1T = jnp.zeros((1, length), jnp.int32)
        return {"inputs": tokens_1T, "targets": tokens_1T}

    def sequence_length(self, config, max_input_len: int, max_target_len: int) -> int:
        """The longest sequence the model holds positions for, from the data's lengths."""
        if self.reads_images:
            longest = config.vit.num_patches
        else:
            longest = max(max_input_len, max_target_len)
        return longest + (self.classifier and config.pooling == "cls")  # the class token

    def check(self, config) -> None:
        if self.classifier and config.num_classes < 2:
            raise ValueError(
                f"model.num_classes={config.num_classes} must be >= 2 for "
                f"model.family={self.name!r}"
            )
        self.extra_check(config)


def _check_encoder_decoder(config) -> None:
    if not (config.num_encoder_layers and config.num_decoder_layers):
        raise ValueError(
            "model.family='encoder_decoder' needs num_encoder_layers >= 1 and "
            f"num_decoder_layers >= 1, got {config.num_encoder_layers} and "
            f"{config.num_decoder_layers}"
        )
    if config.tokens.bos is None:
        raise ValueError(
            "model.family='encoder_decoder' starts its decoder from BOS, and "
            "model.tokens.bos_id=-1 (none); valid: the tokenizer's BOS id"
        )


for _family in (
    Family("encoder_decoder", "seq2seq", decodes="source", extra_check=_check_encoder_decoder),
    Family("decoder_only", "lm", decodes="prompt"),
    Family("encoder_classifier", "classification"),
    Family("vit", "classification", reads_images=True),
):
    FAMILIES.add(_family.name, _family)


def family_of(config) -> Family:
    return FAMILIES[config.family]


def check_decodable(config) -> Family:
    """The family of `config`, which must generate sequences."""
    family = family_of(config)
    if family.decodes is None:
        valid = [name for name in FAMILIES if FAMILIES[name].decodes]
        raise ValueError(
            f"model.family={config.family!r} does not generate sequences; valid: {valid}"
        )
    return family
