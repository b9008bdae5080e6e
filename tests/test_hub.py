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
