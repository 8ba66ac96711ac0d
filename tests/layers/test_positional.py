"""Positional encodings against their formulas and their defining properties."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.config import PositionalConfig
from transformer_jax.layers import positional


def test_sinusoidal_table_matches_formula_exactly():
    table = positional.sinusoidal_table(50, 16)
    for pos in (0, 1, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert table[pos, 2 * i] == np.float32(np.sin(angle))
            assert table[pos, 2 * i + 1] == np.float32(np.cos(angle))
    assert np.abs(table).max() <= 1.0


def test_sines_first_table_is_marians_and_the_interleaved_one_permuted():
    """Marian's table (position_enc[pos, j] = pos / 10000^(2 (j // 2) / D), sines of the even
    columns first, then cosines of the odd ones) is the paper's with its features permuted."""
    length, d_model = 40, 16
    pos_L1 = np.arange(length, dtype=np.float64)[:, None]
    enc_LD = pos_L1 / np.power(10000, 2 * (np.arange(d_model) // 2) / d_model)
    marian = np.concatenate([np.sin(enc_LD[:, 0::2]), np.cos(enc_LD[:, 1::2])], axis=1)
    sines_first = positional.sinusoidal_table(length, d_model, layout="sines_first")
    np.testing.assert_allclose(sines_first, marian, rtol=0, atol=1e-7)
    interleaved = positional.sinusoidal_table(length, d_model)
    permutation = np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])
    np.testing.assert_array_equal(sines_first, interleaved[:, permutation])
    assert not np.array_equal(sines_first, interleaved)


def test_sinusoidal_layout_reaches_the_embeddings_and_is_validated():
    config = PositionalConfig(max_len=10, sinusoidal_layout="sines_first")
    x = jnp.zeros((1, 4, 8))
    added = positional.AddPositional(config).apply({}, x, jnp.arange(4)[None])
    expected = positional.sinusoidal_table(10, 8, layout="sines_first")[:4]
    np.testing.assert_array_equal(added[0], expected)
    with pytest.raises(ValueError, match=r"sinusoidal_layout='paired' is not valid; choose"):
        PositionalConfig(sinusoidal_layout="paired")
    with pytest.raises(ValueError, match=r"sinusoidal_layout='sines_first' has no effect"):
        PositionalConfig(kind="learned", sinusoidal_layout="sines_first")


@pytest.mark.parametrize("use_jit", [False, True])
def test_rotary_dot_product_depends_only_on_offset(use_jit):
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(1, 1, 1, 16)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(1, 1, 1, 16)), jnp.float32)
    rotate = jax.jit(positional.apply_rotary) if use_jit else positional.apply_rotary

    def score(m, n):
        qm = rotate(q, jnp.array([[m]]))
        kn = rotate(k, jnp.array([[n]]))
        return float(jnp.sum(qm * kn))

    for offset in (0, 3, -5):
        scores = [score(m, m - offset) for m in (5, 11, 40)]
        np.testing.assert_allclose(scores, scores[0], rtol=1e-4, atol=1e-4)
    assert abs(score(5, 2) - score(5, 4)) > 1e-3


def test_rotary_preserves_norm_and_is_identity_at_zero():
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 4, 8))
    np.testing.assert_allclose(
        positional.apply_rotary(x, jnp.zeros((2, 3), jnp.int32)), x, rtol=1e-6
    )
    rotated = positional.apply_rotary(x, jnp.arange(3)[None].repeat(2, 0) * 7)
    np.testing.assert_allclose(
        jnp.linalg.norm(rotated, axis=-1), jnp.linalg.norm(x, axis=-1), rtol=1e-5
    )


def test_alibi_slopes_and_bias():
    np.testing.assert_allclose(positional.alibi_slopes(8), [2 ** -(k + 1) for k in range(8)])
    assert len(positional.alibi_slopes(6)) == 6
    pos = jnp.arange(4)[None]
    bias = positional.alibi_bias(pos, pos, 2, causal=True)[0]
    np.testing.assert_allclose(bias[0, 3, 1], -(2**-4) * 2)
    bidirectional = positional.alibi_bias(pos, pos, 2, causal=False)[0]
    np.testing.assert_allclose(bidirectional[1, 1, 3], -(2**-8) * 2)


def test_additive_encodings():
    cfg = PositionalConfig(max_len=10)
    x = jnp.zeros((1, 4, 8))
    pos = jnp.arange(4)[None]
    sin = positional.AddPositional(dataclasses.replace(cfg, kind="sinusoidal")).apply({}, x, pos)
    np.testing.assert_allclose(sin[0], positional.sinusoidal_table(10, 8)[:4])
    index = positional.AddPositional(dataclasses.replace(cfg, kind="index")).apply({}, x, pos)
    np.testing.assert_allclose(index[0, :, 3], [1, 2, 3, 4])
    for kind in ("rotary", "alibi", "none"):
        module = positional.AddPositional(dataclasses.replace(cfg, kind=kind))
        np.testing.assert_array_equal(module.apply({}, x, pos), x)
    learned = positional.AddPositional(dataclasses.replace(cfg, kind="learned"))
    params = learned.init(jax.random.PRNGKey(0), x, pos)
    table = params["params"]["table"]["embedding"]
    np.testing.assert_allclose(learned.apply(params, x, pos)[0], table[:4])


@pytest.mark.parametrize("kind", list(positional.ENCODINGS))
def test_positions_past_the_table_raise_for_table_encodings_only(kind):
    """A table lookup past max_len would clamp (sinusoidal) or give NaN (learned): an error
    naming the length and the limit, raised while tracing; other encodings have no table."""
    module = positional.AddPositional(PositionalConfig(kind=kind, max_len=4))
    x, pos = jnp.zeros((1, 6, 8)), jnp.arange(6)[None]
    if positional.ENCODINGS[kind].limited_to_table:
        with pytest.raises(ValueError, match="6 positions, more than model.positional.max_len=4"):
            module.init(jax.random.PRNGKey(0), x, pos)
        params = module.init(jax.random.PRNGKey(0), x[:, :4], pos[:, :4])
        with pytest.raises(ValueError, match="max_len=4"):
            jax.jit(module.apply)(params, x, pos)
    else:
        params = module.init(jax.random.PRNGKey(0), x, pos)
        assert np.isfinite(module.apply(params, x, pos)).all()


def test_sinusoidal_base_reaches_the_table():
    cfg = PositionalConfig(kind="sinusoidal", base=100.0, max_len=10)
    x, pos = jnp.zeros((1, 4, 8)), jnp.arange(4)[None]
    added = positional.AddPositional(cfg).apply({}, x, pos)
    np.testing.assert_allclose(added[0], positional.sinusoidal_table(10, 8, base=100.0)[:4])
    assert not np.allclose(added[0], positional.sinusoidal_table(10, 8)[:4])


def test_rotary_base_reaches_the_rotation():
    x = jax.random.normal(jax.random.PRNGKey(0), (1, 3, 2, 8))
    pos = jnp.arange(3)[None] * 5
    rotated = positional.encoding(PositionalConfig(kind="rotary", base=500.0)).rotate(x, pos)
    np.testing.assert_allclose(rotated, positional.apply_rotary(x, pos, 500.0), rtol=1e-6)
    assert not np.allclose(rotated, positional.apply_rotary(x, pos), atol=1e-3)


def test_hooks_of_each_encoding():
    """What each registered encoding declares: only table lookups limit positions to max_len,
    only rotary rotates, only alibi biases the logits."""
    registry = positional.ENCODINGS
    assert set(registry.names()) == {"sinusoidal", "learned", "rotary", "alibi", "none", "index"}
    assert {k for k in registry if registry[k].limited_to_table} == {"sinusoidal", "learned"}
    x = jax.random.normal(jax.random.PRNGKey(0), (1, 4, 2, 8))
    pos = jnp.arange(4)[None]
    for kind in registry:
        encoding = positional.encoding(PositionalConfig(kind=kind))
        rotated = not np.allclose(encoding.rotate(x, pos), x)
        bias = encoding.logit_bias(None, pos, pos, 2, causal=True)
        assert rotated == (kind == "rotary"), kind
        assert (bias is not None) == (kind == "alibi"), kind
    with pytest.raises(ValueError, match=r"model.positional.kind='fourier' is not valid"):
        registry["fourier"]


def _valid(lengths, width):
    return jnp.arange(width)[None, :] < jnp.asarray(lengths)[:, None]


@pytest.mark.parametrize("scheme", ["offset", "batch_offset", "randomized"])
def test_training_positions_are_ordered_in_range_and_deterministic(scheme):
    valid_BT = _valid([1, 3, 6, 6, 2], 6)
    key = jax.random.PRNGKey(3)
    pos_BT = np.asarray(positional.training_positions(scheme, key, valid_BT, 20))
    assert pos_BT.dtype == np.int32 and pos_BT.shape == (5, 6)
    assert pos_BT.min() >= 0 and pos_BT.max() < 20
    for row, n in zip(pos_BT, [1, 3, 6, 6, 2], strict=True):
        assert np.all(np.diff(row[:n]) > 0), row  # real tokens: strictly increasing
    again = positional.training_positions(scheme, key, valid_BT, 20)
    np.testing.assert_array_equal(again, pos_BT)
    other = positional.training_positions(scheme, jax.random.PRNGKey(4), valid_BT, 20)
    assert not np.array_equal(other, pos_BT)


def test_offset_positions_are_consecutive_from_a_random_start_covering_the_table():
    n = 5
    valid_BT = _valid([n] * 2000, 8)
    pos_BT = np.asarray(
        positional.training_positions("offset", jax.random.PRNGKey(0), valid_BT, 12)
    )
    starts = pos_BT[:, 0]
    np.testing.assert_array_equal(pos_BT[:, :n], starts[:, None] + np.arange(n))
    # Offsets are uniform over every start that keeps the n real tokens in the table.
    assert set(starts.tolist()) == set(range(12 - n + 1))


def test_batch_offset_positions_share_one_start_below_the_batch_length():
    """tensor2tensor's position_start_index="random": one offset per batch, uniform in [0, T)."""
    valid_BT = _valid([2, 5, 8], 8)
    starts = []
    for seed in range(300):
        pos_BT = np.asarray(
            positional.training_positions("batch_offset", jax.random.PRNGKey(seed), valid_BT, 64)
        )
        np.testing.assert_array_equal(pos_BT, pos_BT[:1] + np.zeros((3, 1), np.int32))
        np.testing.assert_array_equal(pos_BT[0], pos_BT[0, 0] + np.arange(8))
        starts.append(int(pos_BT[0, 0]))
    assert set(starts) == set(range(8))
    # A table shorter than twice the batch length bounds the offset instead.
    for seed in range(50):
        key = jax.random.PRNGKey(seed)
        short = np.asarray(positional.training_positions("batch_offset", key, valid_BT, 10))
        assert short.max() <= 9 and np.all(np.diff(short, axis=1) == 1)


def test_randomized_positions_are_a_uniform_sorted_subset_for_each_real_length():
    """Ruoss et al. 2023: n positions drawn without replacement from [0, L), sorted. The
    first of n uniform draws from L slots has mean (L - n) / (n + 1) in closed form."""
    length, n = 20, 3
    valid_BT = _valid([n] * 4000, 6)
    pos_BT = np.asarray(
        positional.training_positions("randomized", jax.random.PRNGKey(1), valid_BT, length)
    )
    assert len({tuple(r) for r in pos_BT[:, :n]}) > 500  # many distinct subsets
    np.testing.assert_allclose(pos_BT[:, 0].mean(), (length - n) / (n + 1), rtol=0.05)
    # Even a short row reaches the end of the range, which plain positions never would.
    assert pos_BT[:, n - 1].max() == length - 1


def test_batch_randomized_is_one_sorted_subset_for_the_batchs_longest_row():
    """Ruoss et al.'s noisy_fixed_positional_encodings: one sorted n-subset of [0, L) per
    batch, n its rows' real length, even in a batch padded further (T > n); where the rows
    fill the batch it is the sorted T-subset their code draws. Closed form: the first of n
    sorted uniform draws from L slots has mean (L - n) / (n + 1), the last L - 1 minus that."""
    length, n, width = 40, 3, 12
    valid_BT = _valid([n, n], width)
    draw = jax.vmap(
        lambda k: positional.training_positions("batch_randomized", k, valid_BT, length)
    )
    pos_KBT = np.asarray(jax.jit(draw)(jax.random.split(jax.random.PRNGKey(0), 3000)))
    np.testing.assert_array_equal(pos_KBT[:, 0], pos_KBT[:, 1])  # one subset per batch
    assert np.all(np.diff(pos_KBT[:, 0, :n], axis=-1) > 0)
    assert pos_KBT.min() >= 0 and pos_KBT.max() < length
    assert all(len(set(row.tolist())) == width for row in pos_KBT[:, 0])  # padding: distinct
    firsts, lasts = pos_KBT[:, 0, 0], pos_KBT[:, 0, n - 1]
    expected = (length - n) / (n + 1)
    np.testing.assert_allclose(np.mean(firsts), expected, rtol=0.08)
    np.testing.assert_allclose(np.mean(lasts), length - 1 - expected, rtol=0.03)
    full_BT = _valid([width, 5], width)  # the longest row fills the batch
    key = jax.random.PRNGKey(7)
    subset = np.sort(np.asarray(jax.random.choice(key, length, shape=(width,), replace=False)))
    pos_BT = np.asarray(positional.training_positions("batch_randomized", key, full_BT, length))
    np.testing.assert_array_equal(pos_BT[1], subset)


def test_training_positions_need_room_in_the_table():
    with pytest.raises(ValueError, match="more than model.positional.max_len=4"):
        positional.training_positions("offset", jax.random.PRNGKey(0), _valid([2], 6), 4)


@pytest.mark.parametrize(
    ("kind", "scheme"), [("none", "offset"), ("alibi", "offset"), ("rotary", "offset")]
)
def test_train_positions_an_encoding_cannot_see_is_rejected(kind, scheme):
    with pytest.raises(ValueError, match=rf"train_positions='{scheme}' has no effect .*'{kind}'"):
        PositionalConfig(kind=kind, train_positions=scheme)
    with pytest.raises(ValueError, match=r"train_positions='shuffled'.*'randomized'"):
        PositionalConfig(train_positions="shuffled")
