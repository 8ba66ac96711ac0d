"""Tokens per second of cached vs uncached greedy decoding, for a small decoder-only model.

  python -m benchmarks.decode_speed [--new_tokens=256 --batch=4 --d_model=128 --layers=2]

Both decode the same `new_tokens` tokens from BOS under one jit each (compile time excluded,
best of `--repeats`): `cached` keeps keys and values (transformer_jax.decoding.cached_step),
`uncached` re-runs the model on the whole fixed-size buffer every step (full_forward_step), the
only way to avoid recompiling per length. Parameters are random: EOS (the model's
`model.tokens`) is masked out so that every row decodes all `new_tokens`. Exits with status 1
if the cache is less than `--min_speedup` times faster.
"""

import argparse
import sys
import time

import jax
import jax.numpy as jnp

from transformer_jax import decoding
from transformer_jax.config import (
    AttentionConfig,
    FeedForwardConfig,
    ModelConfig,
    PositionalConfig,
    TokenConfig,
)
from transformer_jax.models import build_model


def without_eos(step, tokens: TokenConfig):
    """The same step, with `tokens`' EOS (where there is one) made impossible, so that decoding
    runs to the length limit."""
    if tokens.eos is None:
        return step

    def step_without_eos(cache, ids_B):
        logits_BV, cache = step(cache, ids_B)
        return logits_BV.at[:, tokens.eos].set(-jnp.inf), cache

    return step_without_eos


def decode_fn(model, make_step, batch: int, new_tokens: int):
    tokens = model.config.tokens

    @jax.jit
    def decode(variables):
        step, cache = make_step(model, variables, batch_size=batch, length=new_tokens)
        prompt = jnp.zeros((batch, 0), jnp.int32)
        return decoding.left_to_right(
            without_eos(step, tokens), cache, prompt, max_new_tokens=new_tokens, tokens=tokens
        )

    return decode


def tokens_per_second(decode, variables, tokens: int, repeats: int) -> tuple[float, jax.Array]:
    output = jax.block_until_ready(decode(variables))  # Compiles.
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        output = jax.block_until_ready(decode(variables))
        best = min(best, time.perf_counter() - start)
    return tokens / best, output


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new_tokens", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--d_model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min_speedup", type=float, default=5.0)
    args = parser.parse_args()

    config = ModelConfig(
        family="decoder_only",
        vocab_size=64,
        d_model=args.d_model,
        attention=AttentionConfig(num_heads=4),
        ffn=FeedForwardConfig(d_ff=4 * args.d_model),
        num_decoder_layers=args.layers,
        positional=PositionalConfig(max_len=args.new_tokens),
        dropout_rate=0.0,
    )
    model = build_model(config)
    ids = jnp.ones((args.batch, args.new_tokens), jnp.int32)
    variables = jax.jit(model.init)(jax.random.PRNGKey(0), ids)
    tokens = args.batch * args.new_tokens
    print(
        f"decoder-only d_model={args.d_model} layers={args.layers} batch={args.batch}, "
        f"{args.new_tokens} new tokens per row, {jax.devices()[0].platform}"
    )
    rates = {}
    outputs = {}
    for name, make_step in (
        ("cached", decoding.cached_step),
        ("uncached", decoding.full_forward_step),
    ):
        decode = decode_fn(model, make_step, args.batch, args.new_tokens)
        rates[name], outputs[name] = tokens_per_second(decode, variables, tokens, args.repeats)
        print(f"{name:>9}: {rates[name]:10.0f} tokens/s")
    speedup = rates["cached"] / rates["uncached"]
    same = bool(jnp.all(outputs["cached"] == outputs["uncached"]))
    print(f"  speedup: {speedup:10.1f}x   identical outputs: {same}")
    if speedup < args.min_speedup or not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
