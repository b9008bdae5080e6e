"""The hub over BERT- and ALBERT-family checkpoints in fairseq's layout (what ``fairseq-train
--user-dir`` writes for ``bert_ext_*``/``albert_ext_*``): WordPiece or SentencePiece pieces
mapped through the data's ``dict.txt``, one separator between a pair, segment ids, tagging."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import roberta_ext
from roberta_ext.checkpoints import save_roberta_checkpoint
from roberta_ext.families import preset
from roberta_ext.modeling import RobertaModel
from roberta_ext.tokenizers import Dictionary
from roberta_ext.tokenizers.sentencepiece_tokenizer import SentencePieceTokenizer, train_sentencepiece
from roberta_ext.tokenizers.wordpiece import WordPieceTokenizer, train_wordpiece_vocab, write_vocab
from tests.conftest import REPO

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Alice lives in Paris; Bob lives in Berlin.",
    "Numbers like 1,234 and 56 appear too.",
    "A second sentence follows the first one.",
] * 20


def fairseq_dir(directory: Path, pieces: list[list[str]], name: str, *, labels: list[str] | None = None) -> Path:
    """A model folder as fairseq-train leaves it: model.pt and the dict.txt fairseq-preprocess
    builds from tokenized text (+ label/dict.txt for a tagger)."""
    dictionary = Dictionary()
    for line in pieces:
        for piece in line:
            dictionary.add_symbol(piece)
    directory.mkdir(parents=True, exist_ok=True)
    dictionary.save(directory / "dict.txt")
    torch.manual_seed(0)
    model = RobertaModel(preset(name, vocab_size=len(dictionary) + 1, padding_idx=1))
    if labels:
        model.register_token_head("tagger", num_labels=len(labels))
        (directory / "label").mkdir()
        (directory / "label" / "dict.txt").write_text("".join(f"{label} 1\n" for label in labels))
    save_roberta_checkpoint(model, directory / "model.pt")
    return directory


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("bert")
    write_vocab(train_wordpiece_vocab(CORPUS, vocab_size=120), directory / "vocab.txt")
    wordpiece = WordPieceTokenizer.from_file(directory / "vocab.txt")
    fairseq_dir(directory, [wordpiece.tokenize(line) for line in CORPUS], "bert-tiny", labels=["O", "PER", "LOC"])
    return directory


@pytest.fixture(scope="module")
def bert(bert_dir):
    return roberta_ext.from_pretrained(str(bert_dir)), WordPieceTokenizer.from_file(bert_dir / "vocab.txt")


def test_bert_checkpoint_tokenizes_through_its_dict_txt(bert):
    hub, wordpiece = bert
    dictionary = hub.dictionary
    text = "Alice lives in Berlin."
    assert hub.encode(text).tolist() == [0, *(dictionary.index(p) for p in wordpiece.tokenize(text)), 2]
    assert hub.decode(hub.encode(text)) == wordpiece.decode(wordpiece.encode(text))
    pair = hub.encode("the quick fox", "the lazy dog")
    first = len(wordpiece.tokenize("the quick fox")) + 2
    assert pair.tolist().count(2) == 2  # [CLS] a [SEP] b [SEP]: one separator, unlike RoBERTa's two
    assert hub.segments(pair).tolist() == [0] * first + [1] * (len(pair) - first)


def test_bert_features_use_segments_and_tagging_labels_each_word(bert):
    hub, _ = bert
    pair = hub.encode("the quick fox", "the lazy dog")
    with torch.no_grad():
        with_segments = hub.extract_features(pair)
        without = hub.model(pair[None], features_only=True)[0]
    assert not torch.allclose(with_segments, without)  # segment 1 embeddings were added to B
    tagged = hub.tag("Alice lives in Paris")
    assert [word for word, _, _ in tagged] == ["Alice", "lives", "in", "Paris"]
    assert {label for _, label, _ in tagged} <= {"O", "PER", "LOC"}
    assert all(0.0 < p <= 1.0 for _, _, p in tagged)
    with pytest.raises(KeyError, match="tagger"):
        hub.tag("x", head="absent")


def assert_fills_like_the_model(hub, masked_input: str) -> list:
    """``fill_mask`` ranks what the model's LM head gives at the mask position (the index the
    plugin's tasks trained it on: the ``<mask>`` appended to ``dict.txt``)."""
    filled = hub.fill_mask(masked_input, topk=3)
    left, right = masked_input.split("[MASK]")
    ids = [0, *hub.tokenizer.encode(left.rstrip()), hub.task.mask_idx, *hub.tokenizer.encode(right.rstrip()), 2]
    assert hub.task.mask_idx == hub.dictionary.index("<mask>") == len(hub.dictionary) - 1
    with torch.no_grad():
        logits = hub.model(torch.tensor([ids]), features_only=False)[0][0, ids.index(hub.task.mask_idx)]
    best = logits.softmax(-1).topk(3)
    assert [token for _, _, token in filled] == [hub._token_text(i) for i in best.indices.tolist()]
    torch.testing.assert_close(torch.tensor([p for _, p, _ in filled]), best.values)
    return filled


def test_plugin_trained_bert_and_albert_fill_mask_and_mask_tokens(bert, bert_dir, tmp_path):
    """Issue 15: a plugin checkpoint's dict.txt ends with fairseq's ``<mask>`` while its
    tokenizer writes ``[MASK]``; both spellings fill the same mask, whichever way it is loaded."""
    hub, _ = bert
    filled = assert_fills_like_the_model(hub, "the quick brown [MASK] jumps")
    assert hub.fill_mask("the quick brown <mask> jumps", topk=3) == filled
    # A continuation piece ("##llows") joins the word before it, as BERT's detokenizer joins it.
    for sentence, _, token in filled:
        assert sentence in (f"the quick brown{token} jumps", f"the quick brown {token} jumps")
    with pytest.raises(ValueError, match=r"exactly one <mask> or \[MASK\].*got 2"):
        hub.fill_mask("[MASK] and <mask>")
    # The same folder with the tokenizer named as fairseq names it.
    named = roberta_ext.from_pretrained(str(bert_dir), bpe="bert", bpe_vocab_file=str(bert_dir / "vocab.txt"))
    assert named.fill_mask("the quick brown [MASK] jumps", topk=3) == filled
    hub_loaded = torch.hub.load(str(REPO), "roberta", str(bert_dir), source="local")  # the tokenizer from the files
    assert hub_loaded.fill_mask("the quick brown [MASK] jumps", topk=3) == filled

    model_file = train_sentencepiece(CORPUS, tmp_path / "spiece", vocab_size=80, hard_vocab_limit=False)
    spm = SentencePieceTokenizer.from_file(model_file)
    fairseq_dir(tmp_path, [spm.tokenize(line) for line in CORPUS], "albert-tiny")
    albert = roberta_ext.from_pretrained(str(tmp_path), bpe="sentencepiece", sentencepiece_model=str(model_file))
    assert_fills_like_the_model(albert, "bob lives in [MASK].")


def test_albert_checkpoint_tokenizes_with_its_sentencepiece_model(tmp_path):
    model_file = train_sentencepiece(CORPUS, tmp_path / "spiece", vocab_size=80, hard_vocab_limit=False)
    spm = SentencePieceTokenizer.from_file(model_file)
    fairseq_dir(tmp_path, [spm.tokenize(line) for line in CORPUS], "albert-tiny")
    hub = roberta_ext.from_pretrained(str(tmp_path))
    text = "Bob lives in Paris."
    assert hub.encode(text).tolist() == [0, *(hub.dictionary.index(p) for p in spm.tokenize(text)), 2]
    assert hub.decode(hub.encode(text)).lower() == text.lower()
    assert hub.model.cfg.share_layers == "all"
    tokens, _ = hub.encode_batch(["Bob lives in Paris.", ("Alice", "Berlin")])
    assert hub.extract_features(tokens).shape[:2] == tokens.shape


def test_missing_wordpiece_vocabulary_is_named(tmp_path):
    fairseq_dir(tmp_path, [["hello", "world"]], "bert-tiny")
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        roberta_ext.from_pretrained(str(tmp_path))
