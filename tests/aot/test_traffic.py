"""The analytic HBM-traffic count of a train step (transformer_jax/aot/traffic.py) against a
count by hand of a tiny model, term by term."""

import pytest
from tiny_configs import tiny_model

from transformer_jax.aot.traffic import activation_bytes, train_step_traffic


def tiny_decoder(**fields):
    """One decoder layer, d_model 16, 2 heads of 8 sharing one K/V head, relu d_ff 32, 13 ids."""
    changes = {"attention.num_kv_heads": 1}
    return tiny_model("decoder_only", changes, num_decoder_layers=1, vocab_size=13, **fields)


def test_a_tiny_decoder_step_moves_what_a_hand_count_says():
    cfg = tiny_decoder()
    # Saved per token, float32: attention norm in+out 32, Q 16, K 8, V 8, context 16; ffn norm
    # in+out 32, pre-activation 32, activation 32: 176 values, 704 bytes; probabilities 2 heads
    # x 4 keys x 4 bytes = 32; final norm in+out 128 bytes, logits 13 x 4 = 52.
    per_row = 4 * (704 + 32 + 128 + 52)
    assert activation_bytes(cfg, 0, 4) == per_row == 3664
    traffic = train_step_traffic(
        cfg, rows=3, lengths=(0, 4), param_bytes=1000, optimizer_bytes=2000, fsdp=2
    )
    assert traffic.weights == 2 * 1000  # read by the forward and the backward pass
    assert traffic.gradients == 2 * 1000  # written, then read by the update
    assert traffic.optimizer == 2 * (1000 + 2000) / 2  # this chip's half, read and written
    assert traffic.activations == 2 * 3 * 3664  # written by the forward, read by the backward
    assert traffic.total == 2000 + 2000 + 3000 + 21984


def test_full_remat_saves_layer_inputs_and_reads_the_weights_three_times():
    remat = tiny_decoder(remat="full")
    # The layer's input (16 floats a token) and still the final norm and logits.
    assert activation_bytes(remat, 0, 4) == 4 * (16 * 4 + 128 + 52)
    traffic = train_step_traffic(remat, rows=1, lengths=(0, 4), param_bytes=10, optimizer_bytes=0)
    assert traffic.weights == 30


@pytest.mark.parametrize("family", ["encoder_decoder", "decoder_only"])
def test_bfloat16_compute_halves_only_the_compute_dtype_terms(family):
    """Probabilities and logits stay float32 (4 bytes); the rest halves."""
    fp32 = tiny_model(family, num_decoder_layers=1, vocab_size=13)
    bf16 = fp32.override({"dtype": "bfloat16"})
    # Per row of 5 tokens: each attention's probabilities, 2 heads x 5 keys x 4 bytes a token
    # (one self-attention; or encoder, decoder and cross-attention), and 13 float32 logits.
    attentions = 3 if family == "encoder_decoder" else 1
    float32_bytes = attentions * 5 * 2 * 5 * 4 + 5 * 13 * 4
    full, half = activation_bytes(fp32, 5, 5), activation_bytes(bf16, 5, 5)
    assert half - float32_bytes == (full - float32_bytes) / 2 > 0
