"""A run keeps its tokenizer: an edited corpus is refused on resume, never silently remapped, and
a moved one does not stop the run from being sampled (the vocabulary is in the run directory)."""

import json
import re
import shutil

import jax
import jax.numpy as jnp
import pytest

from transformer_jax import decoding, defaults
from transformer_jax.analysis import tokens
from transformer_jax.data import tokenizers
from transformer_jax.run_dir import TOKENIZER_FILE, TOKENIZER_MODEL_FILE
from transformer_jax.train.restore import load_run
from transformer_jax.train.trainer import train_and_evaluate

CORPUS = "the cat sat on the mat.\n\nthe dog ate the hat.\n" * 20


def char_lm_config(data_dir, corpus):
    config = defaults.base_config("text_file")
    config.data.update(path=str(corpus), data_dir=str(data_dir), seq_len=16, batch_size=4)
    config.model.update(family="decoder_only", d_model=16, num_decoder_layers=1)
    config.model.attention.num_heads = 2
    config.model.ffn.d_ff = 32
    config.train.update(steps=4, log_every=2, eval_every=4, checkpoint_every=2, warmup_steps=1)
    config.train.eval_examples = 8
    return config


@pytest.fixture(scope="module")
def trained_once(tmp_path_factory):
    """A char-LM run on CORPUS, trained 4 steps: (config, corpus path, workdir)."""
    root = tmp_path_factory.mktemp("char_lm")
    corpus = root / "corpus.txt"
    corpus.write_text(CORPUS)
    config = char_lm_config(root / "tfds", corpus)
    train_and_evaluate(config, str(root / "run"))
    return config, corpus, root / "run"


@pytest.fixture
def trained(trained_once, tmp_path):
    """A copy of the trained run for one test, its corpus as it trained (tests edit both)."""
    config, corpus, workdir = trained_once
    corpus.write_text(CORPUS)
    shutil.copytree(workdir, tmp_path / "run")
    return config.copy_and_resolve_references(), corpus, tmp_path / "run"


def test_an_edited_corpus_is_refused_on_resume_and_ignored_by_readers(trained):
    config, corpus, workdir = trained
    trained_ids = load_run(str(workdir)).tokenizer.encode("the cat")
    # As many characters as before, so the model's shapes still fit: "!" sorts before "." and
    # takes its id, so every character between them would silently get another id.
    corpus.write_text(CORPUS.replace(".", "!"))
    config.train.steps = 6
    with pytest.raises(ValueError, match=rf"{corpus}.*added: '!', removed: '.'"):
        train_and_evaluate(config, str(workdir))
    run = load_run(str(workdir))
    assert run.tokenizer.encode("the cat") == trained_ids
    with pytest.raises(ValueError, match=rf"{corpus}.*added: '!', removed: '.'"):
        run.dataset  # noqa: B018 (the analysis commands' batches would use the new ids)


def test_a_moved_corpus_still_samples_with_the_stored_vocabulary(trained):
    _, corpus, workdir = trained
    alphabet = "".join(sorted(set(CORPUS)))
    corpus.unlink()
    run = load_run(str(workdir))
    assert run.tokenizer.alphabet == alphabet
    prompt = jnp.asarray([run.tokenizer.encode("the ")], jnp.int32)
    config = decoding.DecodeConfig(strategy="greedy", max_new_tokens=4)
    output = decoding.generate(run.model, run.variables, prompt, config, rng=jax.random.PRNGKey(0))
    assert set(run.tokenizer.decode(output[0])) <= set(alphabet)


def test_a_run_directory_without_a_stored_vocabulary_rebuilds_it_and_says_so(trained, capsys):
    config, _, workdir = trained
    (workdir / TOKENIZER_FILE).unlink()  # as written before runs stored their vocabulary
    capsys.readouterr()
    assert load_run(str(workdir)).tokenizer.alphabet == "".join(sorted(set(CORPUS)))
    assert "rebuilt" in capsys.readouterr().err
    config.train.steps = 6
    assert train_and_evaluate(config, str(workdir)).step == 6
    assert "rebuilt" in capsys.readouterr().out
    assert (workdir / TOKENIZER_FILE).exists()  # stored from then on


def test_a_sentencepiece_model_is_copied_into_the_run_and_compared(tmp_path):
    def texts(words):
        return lambda: [" ".join(words * 3)] * 50

    cached = tmp_path / "data_dir" / "spm.model"
    model = tokenizers.load_or_train_sentencepiece(
        cached, texts(["ein", "Hund", "läuft", "a", "dog", "runs"]), vocab_size=30, max_chars=5000
    )
    run = tmp_path / "run"
    run.mkdir()
    tokenizers.write_tokenizer(model, run)
    shutil.rmtree(cached.parent)  # the data_dir cache goes: the run keeps its copy
    stored = tokenizers.read_tokenizer(run)
    assert stored.encode("ein Hund runs") == model.encode("ein Hund runs")
    tokenizers.check_stored_tokenizer(run, stored)
    other = tokenizers.train_sentencepiece(
        texts(["zwei", "Katzen", "two", "cats"])(), cached, vocab_size=30, max_chars=5000
    )
    with pytest.raises(ValueError, match=rf"{cached}.*differs from .*{TOKENIZER_FILE}"):
        tokenizers.check_stored_tokenizer(run, other)


@pytest.fixture
def sentencepiece_run(tmp_path):
    """A run directory storing a SentencePiece model, and another valid model."""

    def train(words, name):
        lines = [" ".join(words * 3)] * 50
        path = tmp_path / "data_dir" / name
        return tokenizers.train_sentencepiece(lines, path, vocab_size=30, max_chars=5000)

    run = tmp_path / "run"
    run.mkdir()
    tokenizers.write_tokenizer(train(["ein", "Hund", "a", "dog"], "spm.model"), run)
    return run, train(["zwei", "Katzen", "two", "cats"], "other.model")


def test_a_swapped_sentencepiece_model_is_refused_by_name(sentencepiece_run):
    """Another valid model in place of the run's: its ids would mean other text."""
    run, other = sentencepiece_run
    (run / TOKENIZER_MODEL_FILE).write_bytes(other.model_proto)
    message = f"{run / TOKENIZER_MODEL_FILE} is not the SentencePiece model the run trained with"
    with pytest.raises(ValueError, match=re.escape(message)):
        tokenizers.read_tokenizer(run)


def test_a_damaged_or_missing_sentencepiece_model_is_refused_by_name(sentencepiece_run):
    run, _ = sentencepiece_run
    model = run / TOKENIZER_MODEL_FILE
    model.write_bytes(model.read_bytes()[:100])
    with pytest.raises(ValueError, match=re.escape(f"{model} is not the SentencePiece model")):
        tokenizers.read_tokenizer(run)
    model.unlink()
    with pytest.raises(ValueError, match=re.escape(f"{model}, the SentencePiece model ")):
        tokenizers.read_tokenizer(run)


def test_a_cut_short_tokenizer_file_is_an_error_not_an_absent_one(trained):
    """Taken as absent, a resume would rebuild the vocabulary from the (maybe edited) corpus."""
    config, _, workdir = trained
    path = workdir / TOKENIZER_FILE
    path.write_text(path.read_text()[:20])
    with pytest.raises(ValueError, match=re.escape(f"{path} is damaged")):
        tokenizers.read_tokenizer(workdir)
    with pytest.raises(ValueError, match=re.escape(f"{path} is damaged")):
        train_and_evaluate(config, str(workdir))


def test_a_damaged_cached_model_names_the_file_and_the_fix(tmp_path):
    cached = tmp_path / "spm.model"
    cached.write_bytes(b"not a model")
    with pytest.raises(ValueError, match=re.escape(f"{cached} cannot be read")) as error:
        tokenizers.load_or_train_sentencepiece(cached, list, vocab_size=30, max_chars=10)
    assert "delete it to have it trained again" in str(error.value)


@pytest.mark.parametrize("alphabet", [None, 5, ""])
def test_a_char_tokenizer_file_without_its_alphabet_is_damaged(tmp_path, alphabet):
    tokenizers.write_tokenizer(tokenizers.CharTokenizer("abc"), tmp_path)
    path = tmp_path / TOKENIZER_FILE
    spec = json.loads(path.read_text())
    if alphabet is None:
        del spec["alphabet"]
    else:
        spec["alphabet"] = alphabet
    path.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=re.escape(f"{path} is damaged")):
        tokenizers.read_tokenizer(tmp_path)


def test_input_that_is_not_utf8_is_refused_in_one_line(sentencepiece_run):
    """Bytes that are not UTF-8 on the command line reach Python as surrogates, which
    SentencePiece cannot take (a RuntimeError from its bindings)."""
    run, _ = sentencepiece_run
    not_utf8 = b"ein \xff Hund".decode("utf-8", "surrogateescape")  # as sys.argv holds it
    for tokenizer in (tokenizers.read_tokenizer(run), tokenizers.CharTokenizer("ein Hud")):
        with pytest.raises(ValueError, match=re.escape("--input is not UTF-8 text (byte 0xff at")):
            tokens.encode(tokenizer, not_utf8, field="input")
