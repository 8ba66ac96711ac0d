"""BLEU of decoded text: sacreBLEU's scores and signatures, and decoding batches into lines."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sacrebleu
from tiny_configs import tiny_model

from transformer_jax import decoding
from transformer_jax.data.batching import rows_to_batches, seq2seq_row
from transformer_jax.data.tokenizers import CharTokenizer
from transformer_jax.decoding.bleu import corpus_bleu
from transformer_jax.decoding.text import decode_to_text
from transformer_jax.models import build_model

HYPOTHESES = ["The cat sat on the mat.", "A man rides a bike down the street."]
REFERENCES = ["The cat sat on a mat.", "A man is riding a bicycle down the street."]


def test_one_pair_matches_bleu_computed_by_hand():
    # 13a tokens: The cat sat on the mat . / The cat sat on a mat . -> clipped n-gram precisions
    # 6/7, 4/6, 2/5, 1/4, equal lengths (brevity penalty 1): BLEU = geometric mean * 100.
    expected = 100 * math.exp(np.mean(np.log([6 / 7, 4 / 6, 2 / 5, 1 / 4])))
    bleu = corpus_bleu(HYPOTHESES[:1], REFERENCES[:1])
    assert bleu.scores["bleu"] == pytest.approx(expected)
    assert bleu.scores["bleu_lc"] == pytest.approx(expected)


def test_corpus_scores_are_sacrebleus_own():
    bleu = corpus_bleu(HYPOTHESES, REFERENCES)
    assert bleu.scores["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score
    )
    assert bleu.scores["bleu_lc"] == pytest.approx(
        sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], lowercase=True, tokenize="13a").score
    )
    version = sacrebleu.__version__
    assert bleu.signatures == {
        "bleu": f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{version}",
        "bleu_lc": f"nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:{version}",
    }


def test_lowercased_bleu_ignores_case_only():
    shouted = [h.upper() for h in HYPOTHESES]
    cased, upper = corpus_bleu(HYPOTHESES, REFERENCES), corpus_bleu(shouted, REFERENCES)
    assert upper.scores["bleu_lc"] == pytest.approx(cased.scores["bleu_lc"])
    assert upper.scores["bleu"] < cased.scores["bleu"] / 2


def test_hypotheses_and_references_must_pair_up():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_bleu(HYPOTHESES, REFERENCES[:1])


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_decoded_lines_follow_the_examples_whatever_the_batching(strategy):
    """Line i is example i decoded on its own: padding rows are dropped, order is kept."""
    cfg = tiny_model("encoder_decoder", {"positional.max_len": 6})
    model = build_model(cfg)
    tokenizer = CharTokenizer("abcdefghij")  # ids 3..12 (vocab_size 13)
    rng = np.random.default_rng(0)
    sources = [rng.integers(3, 13, size=rng.integers(1, 5)) for _ in range(5)]
    ids = {"pad_id": tokenizer.pad_id, "eos_id": tokenizer.eos_id}
    rows = [seq2seq_row(s, [3], 5, 6, **ids) for s in sources]
    variables = model.init(
        jax.random.PRNGKey(1), jnp.ones((1, 5), jnp.int32), jnp.ones((1, 6), jnp.int32)
    )
    config = decoding.DecodeConfig(strategy, beam_size=3, max_new_tokens=6)

    def lines(batch_size):
        fn = decoding.make_generate_fn(model, config, (batch_size, 5))
        return decode_to_text(fn, variables, rows_to_batches(rows, batch_size), tokenizer)

    alone = lines(1)
    assert len(alone) == 5
    assert lines(2) == alone  # 3 batches, the last with a weight-0 padding row
