"""Decoding: the cache is exact, the strategies do what their papers say, EOS ends a row."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_model

from transformer_jax import decoding
from transformer_jax.analysis.tokens import encode
from transformer_jax.config import DATASET_TOKENS as DATA  # the datasets' PAD 0, BOS 1, EOS 2
from transformer_jax.data.info import BOS_ID, EOS_ID
from transformer_jax.data.tokenizers import CharTokenizer
from transformer_jax.families import FAMILIES, check_decodable
from transformer_jax.models import build_model
from transformer_jax.train import losses

TINY = tiny_model(
    "encoder_decoder", {"attention.num_heads": 4, "attention.num_kv_heads": 2}, vocab_size=12
)
SOURCE = jnp.array([[5, 3, 4, 4, 5, 0], [4, 3, 0, 0, 0, 0]], jnp.int32)  # Ids < 6: valid for V = 6.
# Decoder inputs: BOS first; a PAD in the middle of row 1 must be masked as a key in both paths.
SEQUENCE = jnp.array([[1, 4, 5, 6, 7, 8, 2, 0], [1, 9, 3, 0, 10, 4, 4, 5]], jnp.int32)


def init(cfg, seed=0):
    model = build_model(cfg)
    args = (SOURCE, SEQUENCE) if cfg.family == "encoder_decoder" else (SEQUENCE,)
    return model, model.init(jax.random.PRNGKey(seed), *args)


def inputs_for(family):
    """What `generate` takes: the source, or right-padded prompts of 2 and 1 tokens."""
    return SOURCE if family == "encoder_decoder" else jnp.array([[4, 5, 0], [3, 0, 0]])


def source_for(cfg):
    return SOURCE if cfg.family == "encoder_decoder" else None


def full_logits(model, variables, sequence):
    if model.config.family == "encoder_decoder":
        return model.apply(variables, SOURCE, sequence)
    return model.apply(variables, sequence)


def cached_logits(model, variables, sequence):
    """Feeds `sequence` one token at a time through the cache. -> (B, T, V)."""
    step, cache = decoding.cached_step(
        model, variables, batch_size=2, length=sequence.shape[1], inputs_BS=source_for(model.config)
    )
    logits = []
    for k in range(sequence.shape[1]):
        logits_BV, cache = step(cache, sequence[:, k])
        logits.append(logits_BV)
    return jnp.stack(logits, axis=1)


@pytest.mark.parametrize("family", ["encoder_decoder", "decoder_only"])
@pytest.mark.parametrize(
    "positional", ["sinusoidal", "learned", "rotary", "alibi", "none", "index"]
)
def test_cached_logits_equal_full_forward(family, positional):
    model, variables = init(TINY.replace(family=family).override({"positional.kind": positional}))
    np.testing.assert_allclose(
        cached_logits(model, variables, SEQUENCE),
        full_logits(model, variables, SEQUENCE),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize(
    ("family", "positional"), [("encoder_decoder", "rotary"), ("decoder_only", "alibi")]
)
def test_cached_logits_equal_full_forward_with_sliding_window(family, positional):
    cfg = TINY.replace(family=family).override(
        {
            "positional.kind": positional,
            "attention.sliding_window": 3,
            "attention.num_global_tokens": 1,
        }
    )
    model, variables = init(cfg)
    full = full_logits(model, variables, SEQUENCE)
    np.testing.assert_allclose(cached_logits(model, variables, SEQUENCE), full, atol=1e-5)
    # The window matters: without it the last position's logits differ.
    unwindowed = full_logits(
        build_model(
            cfg.override({"attention.sliding_window": 0, "attention.num_global_tokens": 0})
        ),
        variables,
        SEQUENCE,
    )
    assert np.abs(np.asarray(full - unwindowed))[:, -1].max() > 1e-4


def test_cache_takes_several_tokens_per_call():
    """A prompt can fill the cache in one call (prefill), then one token at a time."""
    model, variables = init(
        TINY.replace(family="decoder_only").override({"positional.kind": "rotary"})
    )
    cached = model.clone(use_cache=True)
    _, cache = cached.apply(variables, jnp.zeros_like(SEQUENCE), mutable=["cache"])
    first, cache = cached.apply({**variables, **cache}, SEQUENCE[:, :5], mutable=["cache"])
    rest, _ = cached.apply({**variables, **cache}, SEQUENCE[:, 5:6], mutable=["cache"])
    full = full_logits(model, variables, SEQUENCE)
    np.testing.assert_allclose(jnp.concatenate([first, rest], 1), full[:, :6], atol=1e-5)


def test_cache_keeps_parameters_and_rejects_packing():
    model, variables = init(TINY.replace(family="decoder_only"))
    cached = model.clone(use_cache=True)
    created = cached.init(jax.random.PRNGKey(0), SEQUENCE)
    assert jax.tree.structure(created["params"]) == jax.tree.structure(variables["params"])
    cache = created["cache"]["decoder"]
    assert set(cache) == {"cache_index", "cached_valid", "layer_0", "layer_1"}
    assert cache["layer_0"]["self_attention"]["cached_key"].shape == (2, 8, 2, 4)  # B, L, K, H
    with pytest.raises(ValueError, match="segment_ids_BT must be None"):
        cached.apply(variables, SEQUENCE, segment_ids_BT=SEQUENCE, mutable=["cache"])


# Loops compile slowly: the tests below use one decoder layer and share greedy outputs. With
# six tokens these seeds give varied outputs; the decoder-only one ends a row with EOS early.
LOOP = TINY.replace(num_decoder_layers=1, vocab_size=6)
SEEDS = {"encoder_decoder": 2, "decoder_only": 1}


@functools.cache
def greedy_outputs(family):
    """A model and its jitted greedy outputs for `inputs_for(family)`."""
    model, variables = init(LOOP.replace(family=family), seed=SEEDS[family])
    return model, variables, np.asarray(decoding.generate(model, variables, inputs_for(family)))


@pytest.mark.parametrize("family", ["encoder_decoder", "decoder_only"])
def test_greedy_output_is_the_argmax_of_a_full_forward_pass(family):
    """Each generated token is the argmax of the model run on the output so far."""
    model, variables, tokens = greedy_outputs(family)
    assert tokens.shape == (2, 8)  # Capped by positional.max_len = 8 (sinusoidal positions).
    decoder_inputs = jnp.pad(tokens, ((0, 0), (1, 0)), constant_values=BOS_ID)[:, :-1]
    args = (SOURCE, decoder_inputs) if family == "encoder_decoder" else (decoder_inputs,)
    logits = model.apply(variables, *args).at[..., jnp.array([0, BOS_ID])].set(-jnp.inf)
    argmax = np.asarray(jnp.argmax(logits, -1))  # PAD and BOS are never generated.
    start = [0, 0] if family == "encoder_decoder" else [2, 1]  # Prompt tokens are given.
    for row in range(2):
        ends = np.flatnonzero(tokens[row] == EOS_ID)
        stop = ends[0] + 1 if len(ends) else tokens.shape[1]
        np.testing.assert_array_equal(
            tokens[row, start[row] : stop], argmax[row, start[row] : stop]
        )
        assert np.all(tokens[row, stop:] == 0)
    if family == "decoder_only":
        np.testing.assert_array_equal(tokens[:, :2], [[4, 5], [3, tokens[1, 1]]])
        assert EOS_ID in tokens[1] and EOS_ID not in tokens[0]


# A hand-built bigram model: the next-token distribution depends on the last token only.
# From BOS, token 3 (p = 0.55) leads to five equally likely tokens, each then certain to end;
# token 4 (p = 0.45) ends with p = 0.99. Greedy takes 3 and scores log(0.55 * 0.2); the better
# sequence is 4, EOS with log(0.45 * 0.99).
VOCAB = 12


def bigram_table():
    probs = np.full((VOCAB, VOCAB), 1e-9)
    probs[BOS_ID, 3], probs[BOS_ID, 4] = 0.55, 0.45
    probs[3, 5:10] = 0.2
    probs[4, EOS_ID], probs[4, 11] = 0.99, 0.01
    probs[5:12, EOS_ID] = 1.0
    probs[EOS_ID, EOS_ID] = probs[0, 0] = 1.0
    return jnp.log(jnp.asarray(probs / probs.sum(1, keepdims=True), jnp.float32))


def bigram_step(table):
    return lambda cache, ids_B: (table[ids_B], cache)


def bigram_score(table, tokens, alpha):
    """log P(tokens through EOS) / lp(length), from the table."""
    previous, total = BOS_ID, 0.0
    for n, token in enumerate(tokens, start=1):
        total += float(table[previous, token])
        if token == EOS_ID:
            return total / ((5 + n) / 6) ** alpha
        previous = token
    raise AssertionError(f"no EOS in {tokens}")


def test_length_penalty_is_gnmt_formula():
    for length, alpha in [(1, 0.6), (7, 0.6), (20, 1.0), (3, 0.0)]:
        expected = ((5 + length) / 6) ** alpha
        assert float(decoding.length_penalty(length, alpha)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_search_beats_greedy_on_a_constructed_model(alpha):
    table = bigram_table()
    prompt = jnp.zeros((1, 0), jnp.int32)
    greedy = decoding.left_to_right(bigram_step(table), (), prompt, max_new_tokens=5, tokens=DATA)
    beam, score = decoding.beam_search(
        bigram_step(table), (), prompt, beam_size=2, alpha=alpha, max_new_tokens=5, tokens=DATA
    )
    greedy, beam = np.asarray(greedy[0]).tolist(), np.asarray(beam[0]).tolist()
    assert greedy == [3, 5, EOS_ID, 0, 0]
    assert beam == [4, EOS_ID, 0, 0, 0]
    assert bigram_score(table, beam, alpha) > bigram_score(table, greedy, alpha)
    assert float(score[0]) == pytest.approx(bigram_score(table, beam, alpha), rel=1e-5)
    expected = (math.log(0.45) + math.log(0.99)) / ((5 + 2) / 6) ** alpha
    assert float(score[0]) == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_of_one_is_greedy(alpha):
    table = jax.random.normal(jax.random.PRNGKey(1), (VOCAB, VOCAB)) * 2.0
    prompt = jnp.array([[3, 4], [5, 0]], jnp.int32)
    greedy = decoding.left_to_right(bigram_step(table), (), prompt, max_new_tokens=6, tokens=DATA)
    beam, _ = decoding.beam_search(
        bigram_step(table), (), prompt, beam_size=1, alpha=alpha, max_new_tokens=6, tokens=DATA
    )
    np.testing.assert_array_equal(beam, greedy)


@pytest.mark.parametrize("family", ["encoder_decoder", "decoder_only"])
def test_beam_of_one_is_greedy_on_a_transformer(family):
    model, variables, greedy = greedy_outputs(family)
    beam_of_one = decoding.DecodeConfig(strategy="beam", beam_size=1, alpha=0.6)
    beam = decoding.generate(model, variables, inputs_for(family), beam_of_one)
    np.testing.assert_array_equal(beam, greedy)


def test_beam_scores_match_a_full_forward_pass():
    """Beams reorder the cache every step; the reported scores must be the model's."""
    model, variables = init(LOOP, seed=2)  # Row 0 never finishes, row 1 ends at once.
    beams, alpha = 3, 0.6

    @jax.jit
    def search(variables):
        step, cache = decoding.cached_step(
            model, variables, batch_size=2 * beams, length=8, inputs_BS=jnp.repeat(SOURCE, 3, 0)
        )
        prompt = jnp.zeros((2, 0), jnp.int32)
        return decoding.beam_search(
            step, cache, prompt, beam_size=beams, alpha=alpha, max_new_tokens=8, tokens=DATA
        )

    tokens, scores = search(variables)
    decoder_inputs = jnp.pad(tokens, ((0, 0), (1, 0)), constant_values=BOS_ID)[:, :-1]
    log_probs = jax.nn.log_softmax(model.apply(variables, SOURCE, decoder_inputs))
    for row in range(2):
        row_tokens = np.asarray(tokens[row])
        ends = np.flatnonzero(row_tokens == EOS_ID)
        length = int(ends[0]) + 1 if len(ends) else len(row_tokens)  # Unfinished: all of it.
        total = sum(float(log_probs[row, n, row_tokens[n]]) for n in range(length))
        assert float(scores[row]) == pytest.approx(total / ((5 + length) / 6) ** alpha, rel=1e-4)
        assert np.all(row_tokens[length:] == 0)


def test_decoding_stops_at_eos_and_pads():
    table = bigram_table()
    # Row 0 ends after two tokens; row 1 is given token 4 as a prompt and ends after one more.
    prompt = jnp.array([[0], [4]], jnp.int32)
    fed = []

    def recording_step(cache, ids_B):
        fed.append(ids_B)
        return table[ids_B], cache

    tokens = decoding.left_to_right(bigram_step(table), (), prompt, max_new_tokens=6, tokens=DATA)
    np.testing.assert_array_equal(tokens[0], [3, 5, EOS_ID, 0, 0, 0, 0])
    np.testing.assert_array_equal(tokens[1], [4, EOS_ID, 0, 0, 0, 0, 0])
    # The loop ends once every row has finished: 3 steps, not 7 (run eagerly to count them).
    with jax.disable_jit():
        decoding.left_to_right(recording_step, (), prompt, max_new_tokens=6, tokens=DATA)
    assert len(fed) == 3


def test_top_k_one_sampling_is_greedy():
    table = jax.random.normal(jax.random.PRNGKey(2), (VOCAB, VOCAB)) * 3.0
    prompt = jnp.array([[3], [7]], jnp.int32)
    greedy = decoding.left_to_right(bigram_step(table), (), prompt, max_new_tokens=8, tokens=DATA)
    top_1 = functools.partial(decoding.sample, temperature=2.0, top_k=1)
    sampled = jax.jit(
        lambda rng: decoding.left_to_right(
            bigram_step(table), (), prompt, max_new_tokens=8, tokens=DATA, choose=top_1, rng=rng
        )
    )
    for seed in range(3):
        np.testing.assert_array_equal(sampled(jax.random.PRNGKey(seed)), greedy)


def test_filter_logits_temperature_top_k_top_p():
    logits = jnp.log(jnp.array([[0.1, 0.4, 0.2, 0.3]]))
    np.testing.assert_allclose(
        decoding.filter_logits(logits, temperature=0.5), logits / 0.5, rtol=1e-6
    )
    kept = lambda **kw: np.asarray(decoding.filter_logits(logits, **kw)[0] > -1e30)  # noqa: E731
    np.testing.assert_array_equal(kept(top_k=2), [False, True, False, True])
    # Nucleus: 0.4 < 0.65, 0.4 + 0.3 >= 0.65: the two most likely tokens.
    np.testing.assert_array_equal(kept(top_p=0.65), [False, True, False, True])
    np.testing.assert_array_equal(kept(top_p=0.75), [False, True, True, True])
    np.testing.assert_array_equal(kept(top_p=1e-6), [False, True, False, False])
    # Kept tokens keep their relative probabilities.
    filtered = jax.nn.softmax(decoding.filter_logits(logits, top_p=0.65))[0]
    np.testing.assert_allclose(filtered, [0, 4 / 7, 0, 3 / 7], atol=1e-6)


def test_sampling_follows_the_tempered_distribution():
    logits = jnp.log(jnp.array([[0.1, 0.4, 0.2, 0.3]]))
    rngs = jax.random.split(jax.random.PRNGKey(0), 20000)
    draws = jax.vmap(lambda r: decoding.sample(logits, r, temperature=2.0))(rngs)[:, 0]
    frequencies = np.bincount(np.asarray(draws), minlength=4) / len(draws)
    expected = np.sqrt([0.1, 0.4, 0.2, 0.3]) / np.sqrt([0.1, 0.4, 0.2, 0.3]).sum()
    np.testing.assert_allclose(frequencies, expected, atol=0.015)


def test_generation_accuracy_is_exact_match():
    model, variables, outputs = greedy_outputs("encoder_decoder")
    metric = jax.jit(lambda b: decoding.generation_accuracy(variables, b, model=model))
    wrong = outputs.copy()
    wrong[1, 0] = wrong[1, 0] % 5 + 1  # Row 1 now differs in its first token.
    batch = {"inputs": SOURCE, "targets": wrong, "example_weights": jnp.array([1.0, 1.0])}
    assert [float(x) for x in metric(batch)["gen_seq_accuracy"]] == [1.0, 2.0]
    weighted = {**batch, "targets": outputs, "example_weights": jnp.array([1.0, 0.0])}
    assert [float(x) for x in metric(weighted)["gen_seq_accuracy"]] == [1.0, 1.0]
    # Greedy decoding reproduces a target exactly when teacher forcing predicts every target
    # token (PAD and BOS excluded, as in decoding), so the two exact-match rates agree.
    logits = model.apply(variables, *FAMILIES["encoder_decoder"].inputs(batch, DATA)[0])
    logits = logits.at[..., jnp.array([0, BOS_ID])].set(-jnp.inf)
    weights = losses.weights_from_targets(wrong, DATA.pad)
    assert (
        float(losses.sequence_accuracy(logits, wrong, batch["example_weights"], weights)[0]) == 1.0
    )


def test_output_length_defaults_and_limits():
    rotary = {"positional.kind": "rotary", "positional.max_len": 8}
    lm = TINY.replace(family="decoder_only").override(rotary)
    resolve = decoding.resolve_max_new_tokens
    assert resolve(TINY.override(rotary), decoding.DecodeConfig(), 6) == 56
    assert resolve(lm, decoding.DecodeConfig(), 3) == 50
    # Table positions stop at max_len: the default is capped, an explicit excess refused.
    assert resolve(TINY, decoding.DecodeConfig(), 6) == 8
    assert resolve(lm.override({"positional.kind": "learned"}), decoding.DecodeConfig(), 3) == 5
    with pytest.raises(ValueError, match=r"max_new_tokens=9 goes past model.positional.max_len=8"):
        resolve(TINY, decoding.DecodeConfig(max_new_tokens=9), 6)


def test_a_source_longer_than_the_position_table_is_refused_before_decoding():
    """The encoder's positions past max_len would be clamped to the table's last row."""
    model, variables = init(TINY)
    long_source = jnp.ones((1, 9), jnp.int32)
    with pytest.raises(ValueError, match="9 tokens, more than model.positional.max_len=8"):
        decoding.make_generate_fn(model, decoding.DecodeConfig(), long_source.shape)
    rotary = TINY.override({"positional.kind": "rotary"})
    model, variables = init(rotary)
    assert decoding.generate(model, variables, long_source).shape[0] == 1


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("strategy", "nucleus", "strategy='nucleus' is not valid"),
        ("temperature", 0.0, "temperature=0.0 must be > 0"),
        ("top_k", -1, "top_k=-1"),
        ("top_p", 0.0, "top_p=0.0"),
        ("beam_size", 0, "beam_size=0"),
        ("alpha", -0.5, "alpha=-0.5"),
        ("alpha", math.nan, "alpha=nan must be a finite number"),
        ("alpha", math.inf, "alpha=inf must be a finite number"),
        ("temperature", math.inf, "temperature=inf must be > 0 and finite"),
    ],
)
def test_bad_decode_config_is_rejected(field, value, match):
    with pytest.raises(ValueError, match=match):
        decoding.DecodeConfig(**{field: value})


def test_classifier_cannot_generate():
    cfg = TINY.replace(family="encoder_classifier", num_classes=3)
    model = build_model(cfg)
    message = (
        r"model.family='encoder_classifier' does not generate sequences; "
        r"valid: \['encoder_decoder', 'decoder_only'\]"
    )
    with pytest.raises(ValueError, match=message):
        decoding.make_generate_fn(model, decoding.DecodeConfig(), (2, 6))
    with pytest.raises(ValueError, match=message):
        check_decodable(cfg)
    with pytest.raises(ValueError, match=message):
        decoding.cached_step(model, {}, batch_size=2, length=4)


def test_command_line_input_drops_spaces_only_when_the_vocabulary_lacks_them():
    symbols = CharTokenizer("0123")
    assert encode(symbols, "0 1 2 3", "input") == encode(symbols, "0123", "input") == [3, 4, 5, 6]
    text = CharTokenizer(" ab")
    assert encode(text, "a b", "input") == [4, 3, 5]
    with pytest.raises(ValueError, match="'x'"):
        encode(symbols, "0 x", "input")


def test_a_beam_that_cannot_fit_is_refused_with_its_estimate_before_decoding(monkeypatch):
    """The estimate is the cache `cached_step` really makes (plus two score tables), and a beam
    wider than the free memory is refused naming the widest that fits."""
    from transformer_jax.decoding import memory

    model, variables = init(TINY)
    length, beams = 7, 3
    _, cache = decoding.cached_step(
        model,
        variables,
        batch_size=2 * beams,
        length=length,
        inputs_BS=jnp.repeat(SOURCE, beams, 0),
    )
    cache_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(cache))
    scores = 2 * 2 * beams * TINY.vocab_size * 4
    assert memory.beam_bytes(model, variables, SOURCE, beams, length) == cache_bytes + scores

    config = decoding.DecodeConfig(strategy="beam", beam_size=4, max_new_tokens=length)
    need = memory.beam_bytes(model, variables, SOURCE, 4, length)
    monkeypatch.setattr(memory, "available_bytes", lambda device: need - 1)
    with pytest.raises(ValueError, match=r"beam_size=4 needs at least .* valid: beam_size <= 3$"):
        decoding.generate(model, variables, SOURCE, config)
    monkeypatch.setattr(memory, "available_bytes", lambda device: need)
    assert decoding.generate(model, variables, SOURCE, config).shape == (2, length)
