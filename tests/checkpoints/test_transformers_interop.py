"""transformers checkpoints through our hub, and ours through transformers.

Golden values come from transformers itself, in the test: small random BERT, ALBERT and
RoBERTa models (and their tokenizers, over vocabularies trained here) are saved with
``save_pretrained``, loaded by ``roberta_ext.from_pretrained(dir)``, and compared on the same
text — ids and segment ids exactly, every hidden state and the MLM logits within 1e-4 on real
tokens. The other way round, our models are exported with ``save_transformers`` and loaded by
transformers' own classes. Round trips are compared tensor by tensor with ``torch.equal``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.peers import require

transformers = require("transformers", "the tests read and write transformers checkpoints")

import roberta_ext
from roberta_ext.checkpoints import CheckpointError
from roberta_ext.checkpoints.transformers import (
    load_transformers,
    read_weights,
    save_transformers,
    transformers_state_dict,
)
from roberta_ext.families import preset
from roberta_ext.modeling import RobertaModel
from roberta_ext.tokenizers.wordpiece import train_wordpiece_vocab, write_vocab
from tests.bpe_fixtures import UNICODE_SAMPLES, training_corpus

TEXTS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "Café naïve façade — Ångström, 東京 and Ελληνικά; tabs\tand  double  spaces.",
    "Numbers 1,234.56 and e-mail a@b.c (parentheses) [brackets] {braces}",
    *UNICODE_SAMPLES[:6],
]
PAIRS = [("Is this the first sentence?", "And this the second one."), ("Short", "Pair with café")]
SMALL = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, max_position_embeddings=128
)


def hf_outputs(model, tokens: torch.Tensor, segments: torch.Tensor | None, pad: int):
    mask = tokens.ne(pad)
    kwargs = {"attention_mask": mask.long()}
    if segments is not None:
        kwargs["token_type_ids"] = segments
    with torch.no_grad():
        return model(tokens, output_hidden_states=True, **kwargs), mask


def assert_features_equal(hub, hf_model, texts):
    """Every hidden state (and MLM logits, when both have them) of a padded batch within 1e-4."""
    tokens, _ = hub.encode_batch(texts)
    segments = hub.segments(tokens) if hub.model.cfg.type_vocab_size >= 2 else None
    out, mask = hf_outputs(hf_model, tokens, segments, hub.dictionary.pad())
    ours = hub.extract_features(tokens, return_all_hiddens=True)
    assert len(ours) == len(out.hidden_states) == hub.model.cfg.encoder_layers + 1
    for theirs, mine in zip(out.hidden_states, ours):
        torch.testing.assert_close(mine[mask], theirs[mask], atol=1e-4, rtol=1e-4)
    logits = getattr(out, "prediction_logits", None)
    if logits is None:
        logits = getattr(out, "logits", None)
    if logits is not None and logits.dim() == 3 and logits.size(-1) == hub.model.cfg.vocab_size:
        with torch.no_grad():
            mine = hub.model(tokens, segment_labels=segments)[0]
        torch.testing.assert_close(mine[mask], logits[mask], atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------------------ BERT


@pytest.fixture(scope="module")
def bert_vocab(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bert_vocab") / "vocab.txt"
    write_vocab(train_wordpiece_vocab(training_corpus()[:3] + TEXTS, vocab_size=400), path)
    return path


def make_bert_dir(directory: Path, vocab: Path, cls=None, **config) -> Path:
    torch.manual_seed(0)
    size = len(vocab.read_text(encoding="utf-8").splitlines())
    model = (cls or transformers.BertForPreTraining)(transformers.BertConfig(vocab_size=size, **{**SMALL, **config}))
    model.eval().save_pretrained(directory)
    transformers.BertTokenizer(str(vocab), do_lower_case=True).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory, bert_vocab) -> Path:
    return make_bert_dir(tmp_path_factory.mktemp("bert"), bert_vocab)


def test_bert_directory_loads_with_identical_ids_segments_and_features(bert_dir):
    hub = roberta_ext.from_pretrained(str(bert_dir))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(bert_dir))
    for text in TEXTS:
        assert hub.encode(text).tolist() == tokenizer(text)["input_ids"], text
    for a, b in PAIRS:
        expected = tokenizer(a, b)
        tokens = hub.encode(a, b)
        assert tokens.tolist() == expected["input_ids"]
        assert hub.segments(tokens).tolist() == expected["token_type_ids"]
    hf_model = transformers.BertForPreTraining.from_pretrained(str(bert_dir)).eval()
    assert_features_equal(hub, hf_model, TEXTS + PAIRS)
    assert hub.decode(hub.encode("hello world")) == "hello world"


def test_bert_next_sentence_head_and_fill_mask_agree_with_transformers(bert_dir):
    hub = roberta_ext.from_pretrained(str(bert_dir))
    hf_model = transformers.BertForPreTraining.from_pretrained(str(bert_dir)).eval()
    tokens = hub.encode(*PAIRS[0])
    out, _ = hf_outputs(hf_model, tokens[None], hub.segments(tokens)[None], hub.dictionary.pad())
    torch.testing.assert_close(
        hub.predict("next_sentence", tokens, return_logits=True), out.seq_relationship_logits, atol=1e-4, rtol=1e-4
    )
    filled = hub.fill_mask("the quick brown [MASK] jumps", topk=3)
    masked = hub.encode("the quick brown [MASK] jumps")
    out, _ = hf_outputs(hf_model, masked[None], None, hub.dictionary.pad())
    position = masked.tolist().index(hub.task.mask_idx)
    best = out.prediction_logits[0, position].softmax(-1).topk(3)
    assert [hub._token_text(i) for i in best.indices.tolist()] == [token for _, _, token in filled]
    torch.testing.assert_close(torch.tensor([p for _, p, _ in filled]), best.values, atol=1e-5, rtol=1e-4)


def test_pytorch_model_bin_and_a_bare_encoder_load_too(tmp_path, bert_vocab):
    directory = make_bert_dir(tmp_path / "bare", bert_vocab, cls=transformers.BertModel)
    weights = read_weights(directory)
    (directory / "model.safetensors").unlink()
    torch.save(weights, directory / "pytorch_model.bin")
    hub = roberta_ext.from_pretrained(str(directory))
    assert not hub.model.has_lm_head and hub.model.pooler is not None
    assert_features_equal(hub, transformers.BertModel.from_pretrained(str(directory)).eval(), TEXTS[:3])
    with pytest.raises(ValueError, match="no masked-LM head"):
        hub.fill_mask("a [MASK] b")


def test_token_classification_heads_tag_with_transformers_labels(tmp_path, bert_vocab):
    labels = ["O", "B-PER", "I-PER", "B-LOC"]
    directory = make_bert_dir(
        tmp_path / "ner",
        bert_vocab,
        cls=transformers.BertForTokenClassification,
        num_labels=4,
        id2label=dict(enumerate(labels)),
        label2id={n: i for i, n in enumerate(labels)},
    )
    hub = roberta_ext.from_pretrained(str(directory))
    sentence = "alice lives in paris today"
    tagged = hub.tag(sentence)
    assert [w for w, _, _ in tagged] == sentence.split()
    hf_model = transformers.BertForTokenClassification.from_pretrained(str(directory)).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    encoding = tokenizer(sentence.split(), is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        probs = hf_model(**encoding).logits[0].softmax(-1)
    firsts = [encoding.word_ids().index(i) for i in range(len(sentence.split()))]
    assert [label for _, label, _ in tagged] == [labels[i] for i in probs[firsts].argmax(-1).tolist()]
    torch.testing.assert_close(
        torch.tensor([p for _, _, p in tagged]), probs[firsts].max(-1).values, atol=1e-5, rtol=1e-4
    )


# ---------------------------------------------------------------------------- ALBERT


@pytest.fixture(scope="module")
def albert_dir(tmp_path_factory) -> Path:
    require("sentencepiece", "ALBERT's tokenizer")
    from roberta_ext.tokenizers import sentencepiece_tokenizer as spm

    directory = tmp_path_factory.mktemp("albert")
    lines = [line for text in training_corpus()[:3] + TEXTS for line in text.splitlines() if line.strip()]
    model_file = spm.train_sentencepiece(lines, directory / "spiece", vocab_size=300)
    torch.manual_seed(0)
    config = transformers.AlbertConfig(vocab_size=300, embedding_size=16, **{**SMALL, "num_hidden_layers": 3})
    transformers.AlbertForPreTraining(config).eval().save_pretrained(directory)
    # transformers 5 builds ALBERT's tokenizer from the model's pieces (see the tokenizer tests);
    # its save_pretrained writes tokenizer.json, and spiece.model stays, as in released ALBERTs.
    from tests.tokenizers.test_sentencepiece_tokenizer import rust_albert

    rust_albert(model_file, lower=True, keep_accents=False).save_pretrained(directory)
    return directory


def test_albert_directory_loads_with_identical_ids_and_features(albert_dir):
    hub = roberta_ext.from_pretrained(str(albert_dir))
    assert hub.model.cfg.share_layers == "all" and hub.model.cfg.embed_dim == 16
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(albert_dir))
    # Where transformers 5's tokenizers-backed ALBERT and the sentencepiece one it replaced
    # disagree (some emoji and rare scripts), we follow the latter: tests/tokenizers has both.
    for text in TEXTS[:3]:
        assert hub.encode(text).tolist() == tokenizer(text)["input_ids"], text
    expected = tokenizer(*PAIRS[1], return_token_type_ids=True)
    tokens = hub.encode(*PAIRS[1])
    assert tokens.tolist() == expected["input_ids"]
    assert hub.segments(tokens).tolist() == expected["token_type_ids"]
    hf_model = transformers.AlbertForPreTraining.from_pretrained(str(albert_dir)).eval()
    assert_features_equal(hub, hf_model, TEXTS + PAIRS)
    out, _ = hf_outputs(hf_model, tokens[None], hub.segments(tokens)[None], hub.dictionary.pad())
    torch.testing.assert_close(
        hub.predict("sentence_order", tokens, return_logits=True), out.sop_logits, atol=1e-4, rtol=1e-4
    )


# --------------------------------------------------------------------------- RoBERTa


def test_roberta_directory_from_transformers_loads(tmp_path, bpe_files):
    """A transformers RoBERTa (vocab.json + merges.txt) with its own random weights."""
    vocab = json.loads(Path(bpe_files.encoder_json).read_text(encoding="utf-8"))
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    tokens = specials + [t for t in vocab if t not in specials and t != "<|endoftext|>"] + ["<mask>"]
    directory = tmp_path / "roberta"
    directory.mkdir()
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}), encoding="utf-8")
    shutil.copy(bpe_files.vocab_bpe, directory / "merges.txt")
    torch.manual_seed(0)
    config = transformers.RobertaConfig(
        vocab_size=len(tokens), type_vocab_size=1, pad_token_id=1, **{**SMALL, "max_position_embeddings": 130}
    )
    transformers.RobertaForMaskedLM(config).eval().save_pretrained(directory)
    tokenizer = transformers.RobertaTokenizer(str(directory / "vocab.json"), str(directory / "merges.txt"))
    tokenizer.save_pretrained(directory)
    hub = roberta_ext.from_pretrained(str(directory))
    for text in TEXTS:
        assert hub.encode(text).tolist() == tokenizer(text)["input_ids"], text
    assert hub.encode(*PAIRS[0]).tolist() == tokenizer(*PAIRS[0])["input_ids"]
    assert_features_equal(hub, transformers.RobertaForMaskedLM.from_pretrained(str(directory)).eval(), TEXTS + PAIRS)


def test_our_roberta_exports_to_transformers_and_back_exactly(tmp_path, bpe_files):
    from tests.test_hub import make_model_dir

    ours = roberta_ext.from_pretrained(str(make_model_dir(tmp_path / "fairseq", bpe_files, max_positions=128)))
    exported = ours.save_transformers(tmp_path / "hf")
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(exported))
    for text in TEXTS[:3]:
        assert hf_tokenizer(text)["input_ids"] == ours.encode(text).tolist(), text
    assert_features_equal(ours, transformers.RobertaForMaskedLM.from_pretrained(str(exported)).eval(), TEXTS[:3])
    back = roberta_ext.from_pretrained(str(exported))
    assert back.encode(TEXTS[0]).tolist() == ours.encode(TEXTS[0]).tolist()
    mine, theirs = ours.model.state_dict(), back.model.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)


# ------------------------------------------------------------------- every family


@pytest.mark.parametrize(
    "name,hf_class",
    [
        ("bert-tiny", "BertForPreTraining"),
        ("albert-tiny", "AlbertForPreTraining"),
        ("tiny", "RobertaForMaskedLM"),
        ("bert-tiny", "BertForSequenceClassification"),
        ("tiny", "RobertaForTokenClassification"),
    ],
)
def test_ours_to_transformers_and_back_is_exact(tmp_path, name, hf_class):
    torch.manual_seed(0)
    model = RobertaModel(preset(name, max_positions=60)).eval()
    if hf_class.endswith("PreTraining"):
        model.register_classification_head("next_sentence" if name == "bert-tiny" else "sentence_order", 2)
    elif hf_class.endswith("SequenceClassification"):
        model.register_classification_head("classifier", 3)
    elif hf_class.endswith("TokenClassification"):
        model.register_token_head("tagger", 5)
    save_transformers(model, tmp_path / "hf", architecture=hf_class)
    hf_model = getattr(transformers, hf_class).from_pretrained(str(tmp_path / "hf")).eval()
    # transformers' own weights equal what we wrote: nothing it initialised itself.
    written = transformers_state_dict(model, hf_class)
    theirs = hf_model.state_dict()
    for key, tensor in written.items():
        assert torch.equal(theirs[key], tensor), key
    back = load_transformers(tmp_path / "hf").model
    mine, again = model.state_dict(), back.state_dict()
    compared = (
        [k for k in mine if back.has_lm_head or not k.startswith("encoder.lm_head.")]
        if hasattr(back, "has_lm_head")
        else list(mine)
    )
    assert set(mine) == set(again)
    for key in compared:
        if key.startswith("encoder.lm_head.") and not hf_class.endswith(("MaskedLM", "PreTraining")):
            continue
        assert torch.equal(mine[key], again[key]), key


def test_strict_loading_names_unused_tensors_and_bad_shapes(tmp_path, bert_vocab):
    directory = make_bert_dir(tmp_path / "bert", bert_vocab)
    weights = read_weights(directory)
    from safetensors.torch import save_file

    save_file({**weights, "bert.encoder.layer.0.extra.weight": torch.zeros(2)}, str(directory / "model.safetensors"))
    with pytest.raises(CheckpointError, match="extra.weight"):
        load_transformers(directory)
    weights["bert.encoder.layer.1.output.dense.weight"] = torch.zeros(3, 3)
    save_file(weights, str(directory / "model.safetensors"))
    with pytest.raises(CheckpointError, match="output.dense.weight has shape"):
        load_transformers(directory)
    del weights["bert.encoder.layer.1.output.dense.weight"]
    save_file(weights, str(directory / "model.safetensors"))
    with pytest.raises(CheckpointError, match="fc2.weight"):
        load_transformers(directory)
    (directory / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="safetensors"):
        load_transformers(directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(CheckpointError, match="model_type 'gpt2'"):
        load_transformers(directory)


def test_export_refuses_to_overwrite_and_leaves_nothing_on_failure(tmp_path):
    model = RobertaModel(preset("bert-tiny"))
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("keep me")
    with pytest.raises(FileExistsError):
        save_transformers(model, tmp_path / "taken")
    assert (tmp_path / "taken" / "file").read_text() == "keep me"
    with pytest.raises(ValueError, match="head"):
        save_transformers(model, tmp_path / "new", architecture="BertForSequenceClassification")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


# --------------------------------------------------------------------------- ELECTRA


@pytest.mark.parametrize("embedding_size", [16, 32])
def test_electra_discriminator_directory_loads_and_detects_replacements_like_transformers(
    tmp_path, bert_vocab, embedding_size
):
    size = len(bert_vocab.read_text(encoding="utf-8").splitlines())
    torch.manual_seed(0)
    config = transformers.ElectraConfig(vocab_size=size, embedding_size=embedding_size, **SMALL)
    transformers.ElectraForPreTraining(config).eval().save_pretrained(tmp_path / "electra")
    transformers.BertTokenizer(str(bert_vocab)).save_pretrained(tmp_path / "electra")
    hub = roberta_ext.from_pretrained(str(tmp_path / "electra"))
    assert hub.model.cfg.family == "electra" and hub.model.cfg.embed_dim == embedding_size
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "electra"))
    assert hub.encode(*PAIRS[0]).tolist() == tokenizer(*PAIRS[0])["input_ids"]
    hf_model = transformers.ElectraForPreTraining.from_pretrained(str(tmp_path / "electra")).eval()
    assert_features_equal(hub, hf_model, TEXTS[:3] + PAIRS)
    tokens = hub.encode(TEXTS[0])
    with torch.no_grad():
        expected = hf_model(tokens[None]).logits[0].sigmoid()[1:-1]
    probs = hub.replaced_token_probs(TEXTS[0])
    torch.testing.assert_close(torch.tensor([p for _, p in probs]), expected, atol=1e-5, rtol=1e-4)
    # and back out: transformers reads exactly our tensors
    hub.save_transformers(tmp_path / "again")
    again = transformers.ElectraForPreTraining.from_pretrained(str(tmp_path / "again")).eval()
    for key, tensor in hf_model.state_dict().items():
        if not key.endswith("position_ids"):
            assert torch.equal(again.state_dict()[key], tensor), key
