"""The hub as users meet it: torch.hub.load without fairseq, batches, long texts, labels,
downloads from a (local) server, and every way a model folder can be wrong."""

from __future__ import annotations

import http.server
import importlib.util
import io
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest
import torch

import roberta_ext
from roberta_ext import download
from roberta_ext.checkpoints import CheckpointError, save_roberta_checkpoint
from roberta_ext.families import preset
from roberta_ext.modeling import RobertaModel
from roberta_ext.tokenizers import Dictionary
from tests.conftest import REPO, run_without_fairseq


def make_model_dir(directory: Path, bpe_files, *, layers: int = 2, max_positions: int = 32, labels=None) -> Path:
    """A fairseq-layout model folder written by our own saver: model.pt, dict.txt, BPE files."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = len(Dictionary.load(bpe_files.dict_txt)) + 1  # + <mask>
    torch.manual_seed(0)
    model = RobertaModel(preset("tiny", vocab_size=vocab, encoder_layers=layers, max_positions=max_positions))
    data = directory
    if labels:
        model.register_classification_head("sentence_classification_head", num_classes=len(labels))
        data = directory / "input0"
        data.mkdir()
        (directory / "label").mkdir()
        (directory / "label" / "dict.txt").write_text("".join(f"{label} 1\n" for label in labels))
    save_roberta_checkpoint(model, directory / "model.pt")
    shutil.copy(bpe_files.dict_txt, data / "dict.txt")
    shutil.copy(bpe_files.encoder_json, directory / "encoder.json")
    shutil.copy(bpe_files.vocab_bpe, directory / "vocab.bpe")
    return directory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, bpe_files) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("model"), bpe_files)


@pytest.fixture(scope="module")
def roberta(model_dir):
    return roberta_ext.from_pretrained(str(model_dir))


def test_torch_hub_load_works_with_fairseq_unavailable(model_dir):
    result = run_without_fairseq(
        "import sys, torch\n"
        f"roberta = torch.hub.load({str(REPO)!r}, 'roberta', sys.argv[1], source='local')\n"
        "tokens = roberta.encode('Hello world!')\n"
        "assert roberta.decode(tokens) == 'Hello world!'\n"
        "hiddens = roberta.extract_features(tokens, return_all_hiddens=True)\n"
        "roberta.register_classification_head('new_task', num_classes=3)\n"
        "assert roberta.predict('new_task', tokens).shape == (1, 3)\n"
        "assert len(roberta.fill_mask('Hello <mask>!', topk=3)) == 3\n"
        "assert not any(m.startswith(('fairseq', 'omegaconf', 'hydra')) for m in sys.modules)\n"
        "print(len(hiddens), tuple(roberta.extract_features(tokens).shape))\n",
        str(model_dir),
    )
    assert result.stdout.split() == ["3", "(1,", "5,", "32)"]


def test_hub_imports_where_fairseq_is_set_to_none(model_dir):
    """``sys.modules["fairseq"] = None`` is a common way to make fairseq unimportable; the key
    is present, so the package must not take it for a loaded fairseq and import the plugin."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nsys.modules['fairseq'] = None\nimport roberta_ext\n"
            "hub = roberta_ext.from_pretrained(sys.argv[1])\nprint(hub.decode(hub.encode('Hello world!')))\n"
            "assert 'roberta_ext.fairseq_plugin' not in sys.modules",
            str(model_dir),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == "Hello world!\n"


def test_hubconf_lists_dependencies_and_documents_entries():
    # torch.hub.list/help only accept GitHub repos; they read the module exactly like this.
    spec = importlib.util.spec_from_file_location("hubconf", REPO / "hubconf.py")
    hubconf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hubconf)
    assert all(importlib.util.find_spec(name) for name in hubconf.dependencies)
    entries = {name for name in dir(hubconf) if callable(getattr(hubconf, name)) and not name.startswith("_")}
    assert {"roberta", "roberta.base", "roberta.large", "roberta.large.mnli"} <= entries
    assert "fill_mask" in hubconf.roberta.__doc__
    assert "roberta.large" in getattr(hubconf, "roberta.large").__doc__


def test_model_comes_back_in_eval_mode(roberta):
    assert not roberta.training and not roberta.model.training
    tokens = roberta.encode("dropout must be off")
    torch.testing.assert_close(roberta.extract_features(tokens), roberta.extract_features(tokens), rtol=0, atol=0)


def test_encode_batch_pads_and_features_match_single_sentences(roberta):
    sentences = ["Hello world!", "A longer sentence with more tokens in it.", ("A pair", "of sentences")]
    tokens, lengths = roberta.encode_batch(sentences)
    assert tokens.shape == (3, int(lengths.max()))
    features, lengths2 = roberta.extract_features_batch(sentences)
    assert lengths.tolist() == lengths2.tolist()
    for i, sentence in enumerate(sentences):
        single = roberta.encode(*((sentence,) if isinstance(sentence, str) else sentence))
        assert tokens[i, : lengths[i]].tolist() == single.tolist()
        assert (tokens[i, lengths[i] :] == roberta.dictionary.pad()).all()
        torch.testing.assert_close(features[i, : lengths[i]], roberta.extract_features(single)[0], atol=1e-5, rtol=0)


def test_too_long_input_raises_value_error_like_fairseq(roberta):
    tokens = roberta.encode("word " * 100)
    with pytest.raises(ValueError, match="tokens exceeds maximum length"):
        roberta.extract_features(tokens)


def test_long_text_by_sliding_windows(roberta):
    tokens = roberta.encode("word after word, " * 30)
    assert tokens.numel() > roberta.max_positions()
    features = roberta.extract_features_long(tokens, stride=10)
    assert features.shape == (1, tokens.numel(), 32)
    # Tokens in the middle of the first window take exactly that window's features.
    first = torch.cat([tokens[:31], tokens.new_tensor([roberta.dictionary.eos()])])
    torch.testing.assert_close(features[0, 5:10], roberta.extract_features(first)[0, 5:10], atol=1e-5, rtol=0)
    short = roberta.encode("short")
    torch.testing.assert_close(roberta.extract_features_long(short), roberta.extract_features(short))
    with pytest.raises(ValueError, match="stride"):
        roberta.extract_features_long(tokens, stride=1000)


def test_fill_mask_errors_and_special_symbols(roberta):
    with pytest.raises(ValueError, match="exactly one <mask>"):
        roberta.fill_mask("no mask here")
    with pytest.raises(ValueError, match="exactly one <mask>"):
        roberta.fill_mask("<mask> and <mask>")
    with torch.no_grad():  # make </s> the certain prediction: it must be reported as itself
        roberta.model.encoder.lm_head.bias[roberta.dictionary.eos()] = 100.0
    try:
        (sentence, prob, token), *_ = roberta.fill_mask("Hello <mask>", topk=2)
    finally:
        with torch.no_grad():
            roberta.model.encoder.lm_head.bias[roberta.dictionary.eos()] = 0.0
    assert token == "</s>" and sentence == "Hello</s>" and prob > 0.99


def test_predict_unknown_head_names_the_registered_ones(roberta):
    with pytest.raises(KeyError, match="no classification head named 'nope'"):
        roberta.predict("nope", roberta.encode("x"))


def test_fine_tuning_folder_gives_label_names(tmp_path, bpe_files):
    folder = make_model_dir(tmp_path / "ft", bpe_files, labels=["negative", "positive"])
    roberta = roberta_ext.from_pretrained(str(folder), data_name_or_path=".")
    assert list(roberta.model.classification_heads) == ["sentence_classification_head"]
    assert roberta.label_name(0) == "negative" and roberta.label_name(1) == "positive"
    tokens, _ = roberta.encode_batch(["good", "bad"])
    assert set(roberta.predict_label("sentence_classification_head", tokens)) <= {"negative", "positive"}
    with pytest.raises(IndexError):
        roberta.label_name(2)


def test_dictionary_that_does_not_belong_to_the_model_is_refused(tmp_path, bpe_files):
    folder = make_model_dir(tmp_path / "m", bpe_files)
    with open(folder / "dict.txt", "a") as f:
        f.write("99999 1\n")
    with pytest.raises(CheckpointError, match=r"dict\.txt.*model\.pt.*does not belong"):
        roberta_ext.from_pretrained(str(folder))


def test_missing_pieces_are_named(tmp_path, bpe_files):
    folder = make_model_dir(tmp_path / "m", bpe_files)
    with pytest.raises(FileNotFoundError, match="other.pt.*holds model.pt: pass checkpoint_file='model.pt'"):
        roberta_ext.from_pretrained(str(folder), checkpoint_file="other.pt")
    shutil.copy(folder / "model.pt", folder / "checkpoint_last.pt")
    (folder / "model.pt").rename(folder / "checkpoint_best.pt")  # a fairseq-train --save-dir
    said = r"holds checkpoint_best\.pt, checkpoint_last\.pt: pass checkpoint_file='checkpoint_best\.pt' \(--checkpoint"
    with pytest.raises(FileNotFoundError, match=said):
        roberta_ext.from_pretrained(str(folder))
    (folder / "checkpoint_best.pt").rename(folder / "model.pt")
    (folder / "dict.txt").unlink()
    with pytest.raises(FileNotFoundError, match="dict.txt"):
        roberta_ext.from_pretrained(str(folder))


def test_bpe_overrides_must_exist(model_dir):
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        roberta_ext.from_pretrained(str(model_dir), gpt2_encoder_json="/nowhere.json", gpt2_vocab_bpe="/nowhere.bpe")
    with pytest.raises(ValueError, match="both"):
        roberta_ext.from_pretrained(str(model_dir), gpt2_encoder_json="/nowhere.json")


def test_bpe_files_the_checkpoint_was_trained_with_are_used(tmp_path, bpe_files, model_dir, monkeypatch):
    """fairseq's hub builds the BPE from the checkpoint's ``cfg.bpe`` (``--bpe gpt2
    --gpt2-encoder-json ...``): a folder without the files still tokenizes as it was trained,
    with paths relative to the working directory as in fairseq; a path that is not here is said."""
    folder = make_model_dir(tmp_path / "m", bpe_files)
    (tmp_path / "bpe").mkdir()
    for name in ("encoder.json", "vocab.bpe"):
        (folder / name).rename(tmp_path / "bpe" / name)
    state = torch.load(folder / "model.pt", weights_only=True)
    state["cfg"]["bpe"] = {"_name": "gpt2", "gpt2_encoder_json": "bpe/encoder.json", "gpt2_vocab_bpe": "bpe/vocab.bpe"}
    torch.save(state, folder / "model.pt")
    monkeypatch.chdir(tmp_path)
    expected = roberta_ext.from_pretrained(str(model_dir)).encode("Hello world! Ünïcode 🙂")
    roberta = roberta_ext.from_pretrained(str(folder), offline=True, cache_dir=tmp_path / "empty-cache")
    assert torch.equal(roberta.encode("Hello world! Ünïcode 🙂"), expected)

    monkeypatch.chdir(folder)  # bpe/ is not here: said, then the usual fallback, which this dict.txt refuses
    said = r"trained with --gpt2-encoder-json 'bpe/encoder.json' --gpt2-vocab-bpe 'bpe/vocab.bpe', which does not"
    with pytest.warns(UserWarning, match=said):
        with pytest.raises(FileNotFoundError, match="gpt2_encoder_json= and gpt2_vocab_bpe="):
            roberta_ext.from_pretrained(str(folder), offline=True, cache_dir=tmp_path / "empty-cache")


def _trained_with_fairseqs_defaults(checkpoint: Path) -> None:
    """Give ``checkpoint`` the BPE options fairseq-train records when it is given no BPE files."""
    state = torch.load(checkpoint, weights_only=True)
    state["cfg"]["bpe"] = {
        "_name": "gpt2",
        "gpt2_encoder_json": download.GPT2_BPE.encoder_json,
        "gpt2_vocab_bpe": download.GPT2_BPE.vocab_bpe,
    }
    torch.save(state, checkpoint)


@pytest.fixture
def no_downloads(monkeypatch):
    def refuse(url, *args, **kwargs):
        raise AssertionError(f"tried to download {url}")

    monkeypatch.setattr(download, "download", refuse)


def test_own_bpe_in_the_data_folder_wins_over_fairseqs_default_urls(tmp_path, bpe_files, model_dir, no_downloads):
    """docs/pretraining.md's layout: ``checkpoints/checkpoint_best.pt`` trained on a BPE of the
    user's own, whose files sit in ``data-bin/`` beside ``dict.txt``; the checkpoint names
    fairseq's default URLs. The data folder's files are used, nothing is downloaded."""
    folder = make_model_dir(tmp_path / "work" / "checkpoints", bpe_files)
    data_bin = tmp_path / "work" / "data-bin"
    data_bin.mkdir()
    for name in ("encoder.json", "vocab.bpe", "dict.txt"):
        (folder / name).rename(data_bin / name)
    (folder / "model.pt").rename(folder / "checkpoint_best.pt")
    _trained_with_fairseqs_defaults(folder / "checkpoint_best.pt")
    expected = roberta_ext.from_pretrained(str(model_dir)).encode("Hello world! Ünïcode 🙂")
    roberta = roberta_ext.from_pretrained(str(folder), "checkpoint_best.pt", str(data_bin), cache_dir=tmp_path / "c")
    assert torch.equal(roberta.encode("Hello world! Ünïcode 🙂"), expected)


def test_fairseqs_default_bpe_is_not_paired_with_a_dictionary_of_another_bpe(tmp_path, bpe_files, no_downloads):
    """Without BPE files anywhere, a checkpoint naming fairseq's default URLs over a ``dict.txt``
    that is not GPT-2's is refused before any download, naming what to pass (not wrong ids)."""
    folder = make_model_dir(tmp_path / "m", bpe_files)
    for name in ("encoder.json", "vocab.bpe"):
        (folder / name).unlink()
    _trained_with_fairseqs_defaults(folder / "model.pt")
    said = r"dict\.txt'.*not GPT-2's 50257.*pass gpt2_encoder_json= and gpt2_vocab_bpe= \(--gpt2-encoder-json"
    with pytest.raises(FileNotFoundError, match=said) as raised:
        roberta_ext.from_pretrained(str(folder), cache_dir=tmp_path / "c")
    assert "\n" not in str(raised.value)


def test_unknown_fairseq_overrides_are_reported_not_silently_dropped(model_dir):
    with pytest.warns(UserWarning, match="user_dir"):
        roberta_ext.from_pretrained(str(model_dir), user_dir="/somewhere")


class _ArchiveHandler(http.server.BaseHTTPRequestHandler):
    archive = b""
    requests = 0

    def do_GET(self):  # noqa: N802 (http.server's naming)
        type(self).requests += 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.archive)))
        self.end_headers()
        self.wfile.write(self.archive)

    def log_message(self, *args):
        pass


def test_from_pretrained_downloads_an_archive_url_once_and_then_works_offline(tmp_path, model_dir):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(model_dir, arcname="roberta.tiny")
    _ArchiveHandler.archive, _ArchiveHandler.requests = buffer.getvalue(), 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ArchiveHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/roberta.tiny.tar.gz"
    try:
        first = roberta_ext.from_pretrained(url, cache_dir=tmp_path / "cache")
        again = roberta_ext.from_pretrained(url, cache_dir=tmp_path / "cache", offline=True)
    finally:
        server.shutdown()
    assert _ArchiveHandler.requests == 1
    tokens = first.encode("Hello world!")
    torch.testing.assert_close(first.extract_features(tokens), again.extract_features(tokens))


def test_known_name_offline_and_not_cached_fails_at_once_naming_url_and_cache(tmp_path):
    with pytest.raises(Exception, match=r"roberta\.base\.tar\.gz(.|\n)*" + str(tmp_path / "cache")):
        roberta_ext.from_pretrained("roberta.base", cache_dir=tmp_path / "cache", offline=True)


def test_bfloat16_inference_stays_close_to_float32(model_dir):
    fp32 = roberta_ext.from_pretrained(str(model_dir))
    bf16 = roberta_ext.from_pretrained(str(model_dir), dtype=torch.bfloat16)
    tokens, _ = fp32.encode_batch(["Hello world!", "A somewhat longer sentence, with more tokens in it."])
    a = fp32.extract_features(tokens)
    b = bf16.extract_features(tokens)
    assert b.dtype == torch.bfloat16
    real = tokens.ne(fp32.dictionary.pad())
    cosine = torch.nn.functional.cosine_similarity(a[real], b[real].float(), dim=-1)
    assert cosine.min() > 0.99


# ----------------------------------------------------------------- unit-level: each method against what it calls
# (scripts/mutation/modules.toml's [hub] judges hub.py by these: the hub's methods give what the library's own
# lower-level functions give for the same model, inputs and options, options that change the result included)

TEXTS = ["Hello world!", "A somewhat longer sentence, with more tokens in it."]


@pytest.fixture(scope="module")
def with_heads(roberta):
    """A hub over a copy of ``roberta``'s model with a 3-class and a 1-output classification head and a tagger,
    labelled by a label dictionary (fairseq's ``label/dict.txt``)."""
    torch.manual_seed(1)
    model = RobertaModel(roberta.model.cfg)
    model.load_state_dict(roberta.model.state_dict())
    model.register_classification_head("sentence_classification_head", num_classes=3)
    model.register_classification_head("one", num_classes=1)
    model.register_token_head("tagger", 3)
    labels = Dictionary()
    for label in ("neg", "neutral", "pos"):
        labels.add_symbol(label)
    return roberta_ext.RobertaHubInterface(model.eval(), roberta.tokenizer, label_dictionary=labels, cfg={"x": 1})


def test_what_the_hub_holds_and_says_about_itself(roberta, with_heads):
    assert roberta.max_positions() == 32 == roberta.model.max_positions()
    assert roberta.device == torch.device("cpu") and roberta.args == roberta.cfg["model"] and roberta.args
    assert with_heads.args == {} and with_heads.cfg == {"x": 1}
    assert roberta_ext.RobertaHubInterface(roberta.model, roberta.tokenizer).cfg == {}
    assert roberta.bpe is roberta.tokenizer.bpe and roberta.dictionary is roberta.tokenizer.dictionary
    assert roberta.mask_token == "<mask>" and roberta.mask_spellings == ("<mask>",)
    task = with_heads.task
    assert task.source_dictionary is task.target_dictionary is with_heads.dictionary
    assert task.mask_idx == with_heads.dictionary.index("<mask>") == len(with_heads.dictionary) - 1
    assert with_heads.labels == ["neg", "neutral", "pos"] and task.label_dictionary.symbols[-1] == "pos"
    explicit = roberta_ext.RobertaHubInterface(roberta.model, roberta.tokenizer, labels=("a", "b"))
    assert explicit.labels == ["a", "b"] and explicit.task.label_dictionary is None
    assert roberta._token_text(roberta.dictionary.eos()) == "</s>"
    assert roberta._token_text(roberta.encode("Hello")[1].item()) == "Hello"


def test_a_dictionary_that_is_not_the_models_is_refused_with_both_sizes(roberta):
    rows = len(roberta.dictionary) + 3
    with pytest.raises(ValueError) as refused:
        roberta_ext.RobertaHubInterface(RobertaModel(preset("tiny", vocab_size=rows)), roberta.tokenizer)
    assert str(refused.value) == (
        f"dictionary has {len(roberta.dictionary)} symbols but the model's embedding has {rows} rows"
    )


def test_a_bert_style_hub_fills_the_mask_its_vocabulary_names(roberta):
    """A dictionary without ``<mask>`` (a transformers BERT's vocab.txt) fills the tokenizer's ``[MASK]``."""

    class Bracketed(type(roberta.tokenizer)):
        mask_token = "[MASK]"

    tokenizer = Bracketed(roberta.tokenizer.bpe, Dictionary.load(roberta.dictionary.source))
    tokenizer.dictionary.add_symbol("[MASK]")
    hub = roberta_ext.RobertaHubInterface(roberta.model, tokenizer)
    assert hub.mask_token == "[MASK]" and hub.mask_spellings == ("[MASK]", "<mask>")
    assert hub.task.mask_idx == len(hub.dictionary) - 1
    both = roberta_ext.RobertaHubInterface(roberta.model, Bracketed(roberta.tokenizer.bpe, roberta.dictionary))
    assert both.mask_token == "<mask>" and both.mask_spellings == ("<mask>", "[MASK]")
    assert [t for _, _, t in both.fill_mask("Hello [MASK]!", topk=3)] == [
        t for _, _, t in both.fill_mask("Hello <mask>!", topk=3)
    ]


def test_encode_decode_and_batches_are_the_inputs_own(roberta):
    inputs = roberta.inputs
    one = roberta.encode("Hello world!")
    assert one.dtype == torch.long and one.tolist() == inputs.encode("Hello world!")
    pair = roberta.encode("Hello", "world", no_separator=True)
    assert pair.tolist() == inputs.encode("Hello", "world", no_separator=True) != inputs.encode("Hello", "world")
    assert roberta.decode(roberta.encode("Hello", "world")) == ["Hello", "world"]
    with pytest.raises(ValueError) as refused:
        roberta.decode(one[None])
    assert str(refused.value) == f"decode takes a 1-D tensor of indices, got shape (1, {len(one)})"
    tokens, lengths = roberta.encode_batch(["Hi", ["Hello", "world"]], no_separator=True)
    expected = inputs.collate([inputs.encode("Hi"), inputs.encode("Hello", "world", no_separator=True)])
    assert torch.equal(tokens, expected[0]) and torch.equal(lengths, expected[1])
    rows = [one, [0, 5, 2]]
    assert all(torch.equal(a, b) for a, b in zip(roberta.collate(rows), inputs.collate(rows)))
    assert torch.equal(roberta.segments(tokens), inputs.segments(tokens))


def test_every_hidden_state_layers_plus_one_as_the_lower_level_gives_them(roberta):
    from roberta_ext.inference.inputs import extract_features

    tokens, _ = roberta.encode_batch(TEXTS)
    hiddens = roberta.extract_features(tokens, return_all_hiddens=True)
    assert len(hiddens) == roberta.model.cfg.encoder_layers + 1 == 3
    expected = extract_features(roberta.model, roberta.inputs, tokens, return_all_hiddens=True)
    assert all(torch.equal(a, b) for a, b in zip(hiddens, expected, strict=True))
    torch.testing.assert_close(roberta.extract_features(tokens), hiddens[-1], rtol=0, atol=0)
    batch, lengths = roberta.extract_features_batch(TEXTS, return_all_hiddens=True)
    assert len(batch) == 3 and all(torch.equal(a, b) for a, b in zip(batch, hiddens))
    assert lengths.tolist() == [len(roberta.encode(t)) for t in TEXTS]


def test_long_features_take_the_stride_asked_for(roberta):
    from roberta_ext.inference.inputs import extract_features_long

    tokens = roberta.encode("word after word, " * 12)
    by_four = roberta.extract_features_long(tokens, stride=4)
    assert torch.equal(by_four, extract_features_long(roberta.model, roberta.inputs, tokens, stride=4))
    assert not torch.equal(by_four, roberta.extract_features_long(tokens))


def test_embed_passes_every_option_to_the_embedder(roberta):
    from dataclasses import replace

    from roberta_ext.embedding.embedder import embed

    hub = roberta_ext.RobertaHubInterface(
        roberta.model,
        roberta.tokenizer,
        sentence_embedding=replace(roberta.sentence_embedding, prompts={"query": "query: "}),
    )
    options = [
        dict(pooling="cls", normalize=True),
        dict(max_length=5, prompt="passage: ", truncate_dim=8, batch_size=1, max_tokens=64),
        dict(prompt_name="query"),
    ]
    for option in options:
        got = hub.embed(TEXTS, **option)
        assert torch.equal(got, embed(hub.model, hub.inputs, hub.sentence_embedding, TEXTS, **option))
        assert not torch.equal(got, hub.embed(TEXTS))
    assert hub.embed(TEXTS).shape == (2, 32) and roberta.sentence_embedding.pooling == ("mean",)


def test_similarity_of_texts_or_embeddings_by_the_hubs_own_measure(roberta):
    from dataclasses import replace

    from roberta_ext.embedding.pooling import similarity

    a, b = roberta.embed(TEXTS[:1]), roberta.embed(TEXTS)
    assert torch.equal(roberta.similarity(TEXTS[:1], TEXTS), similarity(a, b, "cosine"))
    assert torch.equal(roberta.similarity(a, TEXTS), roberta.similarity(TEXTS[:1], b))
    dot = roberta_ext.RobertaHubInterface(
        roberta.model, roberta.tokenizer, sentence_embedding=replace(roberta.sentence_embedding, similarity="dot")
    )
    assert torch.equal(dot.similarity(a, b), a @ b.T)


def test_features_aligned_to_words_every_layer(roberta):
    from roberta_ext.inference.alignment import extract_features_aligned_to_words

    aligned = roberta.extract_features_aligned_to_words("Hello world!", return_all_hiddens=True)
    expected = extract_features_aligned_to_words(roberta.model, roberta.inputs, "Hello world!", return_all_hiddens=True)
    assert aligned.words == expected.words == ["<s>", "Hello", "world", "!", "</s>"]
    assert len(aligned.features) == 3 and all(torch.equal(a, b) for a, b in zip(aligned.features, expected.features))
    assert roberta.extract_features_aligned_to_words("Hello world!").features.shape == (5, 32)


def test_heads_registered_predict_and_label_names(roberta, with_heads):
    from roberta_ext.inference.head_outputs import classify

    hub = roberta_ext.RobertaHubInterface(copy_of_model(roberta.model), roberta.tokenizer)
    hub.register_classification_head("new", num_classes=4, embedding_size=999, inner_dim=7)
    head = hub.model.classification_heads["new"]
    assert head.dense.out_features == 7 and head.out_proj.out_features == 4
    hub.register_classification_head("plain", 2)
    assert hub.model.classification_heads["plain"].dense.out_features == 32
    tokens, _ = with_heads.encode_batch(TEXTS)
    logits = with_heads.predict("sentence_classification_head", tokens, return_logits=True)
    assert torch.equal(
        logits,
        classify(with_heads.model, with_heads.inputs, "sentence_classification_head", tokens, return_logits=True),
    )
    torch.testing.assert_close(with_heads.predict("sentence_classification_head", tokens), logits.log_softmax(-1))
    assert with_heads.predict_label("sentence_classification_head", tokens) == [
        ["neg", "neutral", "pos"][i] for i in logits.argmax(-1).tolist()
    ]
    assert with_heads.label_name(0) == "neg" and with_heads.label_name(2) == "pos"
    for index in (3, -1):
        with pytest.raises(IndexError) as out:
            with_heads.label_name(index)
        assert str(out.value) == f"class index {index} is out of range for 3 labels"
    with pytest.raises(ValueError) as none:
        roberta.label_name(0)
    assert str(none.value) == "no label names: load with data_name_or_path pointing at a folder with label/dict.txt"


def copy_of_model(model: RobertaModel) -> RobertaModel:
    copy = RobertaModel(model.cfg)
    copy.load_state_dict(model.state_dict())
    return copy.eval()


def test_score_choices_tag_and_answer_as_their_functions(roberta, with_heads):
    from roberta_ext.inference.head_outputs import score_choices, tag
    from roberta_ext.inference.qa import answer

    hub = with_heads
    got = hub.score_choices("The sun is hot.", ["yes", "no, it is not"], "one", layout="commonsense_qa")
    expected = score_choices(
        hub.model, hub.inputs, "The sun is hot.", ["yes", "no, it is not"], "one", layout="commonsense_qa"
    )
    assert torch.equal(got, expected) and got.shape == (2,)
    short = hub.score_choices("The sun is hot.", ["yes", "no, it is not"], "one", max_choice_length=2, truncate=True)
    assert torch.equal(
        short,
        score_choices(
            hub.model,
            hub.inputs,
            "The sun is hot.",
            ["yes", "no, it is not"],
            "one",
            max_choice_length=2,
            truncate=True,
        ),
    )
    assert not torch.equal(short, hub.score_choices("The sun is hot.", ["yes", "no, it is not"], "one"))
    with pytest.raises(Exception, match="one output"):
        hub.score_choices("The sun is hot.", ["yes", "no"])  # the default head, sentence_classification_head: 3
    tagged = hub.tag("Ada was born in London")
    assert tagged == tag(hub.model, hub.inputs, hub.labels, "Ada was born in London", "tagger")
    assert [word for word, _, _ in tagged] == ["Ada", "was", "born", "in", "London"]
    with pytest.raises(Exception, match="nope"):
        hub.tag("Ada", head="nope")
    qa = roberta_ext.RobertaHubInterface(copy_of_model(roberta.model), hub.tokenizer)
    qa.model.register_token_head("qa", 2)
    qa.model.register_token_head("other", 2)
    context = "The capital of Zorbia is Quelm, a city of many bridges."
    found = qa.answer("What is the capital?", context, null_threshold=-1e9, max_answer_tokens=2)
    assert found == answer(qa, "What is the capital?", context, null_threshold=-1e9, max_answer_tokens=2)
    assert qa.answer("What is the capital?", context, head="other", null_threshold=-1e9) == answer(
        qa, "What is the capital?", context, head="other", null_threshold=-1e9
    )


def test_replaced_token_probs_of_text_or_tokens(roberta):
    from roberta_ext.families.electra import ElectraPretrainingModel
    from roberta_ext.inference.head_outputs import replaced_token_probs

    torch.manual_seed(0)
    electra = ElectraPretrainingModel(preset("electra-tiny", vocab_size=len(roberta.dictionary))).eval()
    hub = roberta_ext.RobertaHubInterface(electra, roberta.tokenizer)
    tokens = hub.encode("Hello world!")
    expected = replaced_token_probs(hub.model, hub.inputs, tokens)
    assert hub.replaced_token_probs("Hello world!") == hub.replaced_token_probs(tokens) == expected
    assert [text for text, _ in expected] == ["Hello", " world", "!"]


def test_fill_mask_gives_topk_fillings_five_by_default(roberta):
    from roberta_ext.inference.head_outputs import fill_mask

    filled = roberta.fill_mask("Hello <mask>!")
    assert len(filled) == 5 and filled == fill_mask(
        roberta.model, roberta.inputs, "Hello <mask>!", mask="<mask>", topk=5
    )
    assert roberta.fill_mask("Hello <mask>!", topk=2) == filled[:2]
    with pytest.raises(ValueError) as refused:
        roberta.fill_mask("Hello!")
    with pytest.raises(ValueError) as direct:
        fill_mask(roberta.model, roberta.inputs, "Hello!", mask="<mask>")
    assert str(refused.value) == str(direct.value) and "<mask>" in str(refused.value)


def test_save_transformers_writes_the_labels_of_its_head_and_the_special_ids(tmp_path, roberta):
    import json

    from roberta_ext.checkpoints.transformers import SEQUENCE_HEAD, TOKEN_HEAD

    def config(hub, name, **options):
        return json.loads((hub.save_transformers(tmp_path / name, **options) / "config.json").read_text())

    classifier = roberta_ext.RobertaHubInterface(copy_of_model(roberta.model), roberta.tokenizer, labels=["n", "p"])
    classifier.model.register_classification_head(SEQUENCE_HEAD, 2)
    saved = config(classifier, "classifier")
    assert saved["architectures"] == ["RobertaForSequenceClassification"]
    assert saved["id2label"] == {"0": "n", "1": "p"}
    assert [saved[k] for k in ("bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id")] == [0, 2, 0, 2]
    tokenizer_config = json.loads((tmp_path / "classifier" / "tokenizer_config.json").read_text())
    assert tokenizer_config["model_max_length"] == 32 and tokenizer_config["mask_token"] == "<mask>"
    back = roberta_ext.from_pretrained(str(tmp_path / "classifier"))
    assert back.labels == ["n", "p"] and back.mask_token == "<mask>" and back.max_positions() == 32
    assert config(classifier, "as_mlm", architecture="RobertaForMaskedLM")["architectures"] == ["RobertaForMaskedLM"]
    tagger = roberta_ext.RobertaHubInterface(copy_of_model(roberta.model), roberta.tokenizer, labels=["O", "B"])
    tagger.model.register_token_head(TOKEN_HEAD, 2)
    assert config(tagger, "tagger")["id2label"] == {"0": "O", "1": "B"}
    unlabelled = roberta_ext.RobertaHubInterface(roberta.model, roberta.tokenizer, labels=["x", "y"])
    assert config(unlabelled, "plain").get("id2label", {}) != {"0": "x", "1": "y"}


def test_the_exports_hand_their_options_to_the_exporters(roberta, monkeypatch):
    """The exports themselves (ONNX, torch.export) are tested in tests/export; here what the hub hands them."""
    from roberta_ext import export

    calls = []
    monkeypatch.setattr(export, "to_onnx", lambda hub, path, **options: calls.append((hub, path, options)) or path)
    monkeypatch.setattr(
        export, "to_torch_export", lambda hub, path, **options: calls.append((hub, path, options)) or path
    )
    options = dict(head="h", pooling="cls", normalize=True, attention_mask=False)
    assert roberta.export_onnx("m.onnx", opset=17, **options) == "m.onnx"
    assert roberta.export_torch("m.pt2", **options) == "m.pt2"
    assert roberta.export_onnx("d.onnx") == "d.onnx" and roberta.export_torch("d.pt2") == "d.pt2"
    defaults = dict(head=None, pooling=None, normalize=None, attention_mask=True)
    assert calls == [
        (roberta, "m.onnx", {**options, "opset": 17}),
        (roberta, "m.pt2", options),
        (roberta, "d.onnx", {**defaults, "opset": None}),
        (roberta, "d.pt2", defaults),
    ]


def test_embed_batches_as_asked(roberta, monkeypatch):
    """``batch_size`` and ``max_tokens`` bound the batches the model reads (memory), not the embeddings."""
    from roberta_ext.embedding import embedder

    shapes = []
    read = embedder.extract_features

    def recording(model, inputs, tokens, **options):
        shapes.append(tuple(tokens.shape))
        return read(model, inputs, tokens, **options)

    monkeypatch.setattr(embedder, "extract_features", recording)
    texts = ["Hello", "Hello world!", "A somewhat longer sentence."]
    lengths = [len(roberta.encode(text)) for text in texts]
    together = roberta.embed(texts)
    assert shapes == [(3, max(lengths))]
    shapes.clear()
    torch.testing.assert_close(roberta.embed(texts, batch_size=1), together, rtol=0, atol=1e-6)
    assert sorted(shapes) == sorted((1, n) for n in lengths)
    shapes.clear()
    torch.testing.assert_close(roberta.embed(texts, max_tokens=max(lengths)), together, rtol=0, atol=1e-6)
    assert len(shapes) > 1 and all(rows * length <= max(lengths) for rows, length in shapes)


def test_a_tokenizer_without_a_mask_over_a_dictionary_without_one_is_said_to_mask_with_mask(roberta):
    from roberta_ext.tokenizers.gpt2_bpe import FairseqGPT2Tokenizer

    dictionary = Dictionary.load(roberta.dictionary.source)  # dict.txt as read: no <mask> appended
    tokenizer = FairseqGPT2Tokenizer(roberta.tokenizer.bpe, dictionary)
    assert not hasattr(tokenizer, "mask_token") and "<mask>" not in dictionary
    hub = roberta_ext.RobertaHubInterface(RobertaModel(preset("tiny", vocab_size=len(dictionary))), tokenizer)
    assert hub.mask_token == "<mask>" and hub.mask_spellings == ("<mask>",)
    assert hub.task.mask_idx == dictionary.unk()


def test_score_choices_truncates_at_the_models_length_only_when_asked(with_heads):
    from roberta_ext.inference.head_outputs import score_choices

    hub, context = with_heads, "word after word, " * 12
    truncated = hub.score_choices(context, ["yes", "no"], "one", truncate=True)
    expected = score_choices(hub.model, hub.inputs, context, ["yes", "no"], "one", truncate=True)
    assert torch.equal(truncated, expected)
    with pytest.raises(ValueError, match="tokens exceeds maximum length"):
        hub.score_choices(context, ["yes", "no"], "one")


def test_the_special_ids_are_the_dictionarys_for_a_family_that_writes_none_itself(tmp_path, roberta):
    import json

    bert = roberta_ext.RobertaHubInterface(
        RobertaModel(preset("bert-tiny", vocab_size=len(roberta.dictionary))), roberta.tokenizer
    )
    config = json.loads((bert.save_transformers(tmp_path / "bert") / "config.json").read_text())
    assert config["model_type"] == "bert"
    assert [config[k] for k in ("bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id")] == [0, 2, 0, 2]
