"""roberta_ext/loading.py: ``from_pretrained`` builds a hub from a fairseq-layout folder as
fairseq's ``from_pretrained`` reads it — the fine-tuned layout (``input0/``, ``label/``), the
dtype asked for — and says what to pass when the folder is not what was asked. The hub's
outputs on every checkpoint layout are compared with fairseq's in tests/test_hub_vs_fairseq.py."""

from __future__ import annotations

import functools
import json
import shutil
import tarfile
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import roberta_ext
from roberta_ext import download
from roberta_ext.checkpoints import CheckpointError, load_roberta_checkpoint, save_roberta_checkpoint
from roberta_ext.families import preset
from roberta_ext.loading import from_sentence_transformers
from roberta_ext.modeling import RobertaModel
from roberta_ext.tokenizers import Dictionary
from roberta_ext.tokenizers.hf_tokenizer import HFTokenizer
from roberta_ext.tokenizers.registry import BPE_CHOICES
from tests.peers import require
from tests.test_hub import make_model_dir
from tests.test_hub_families import CORPUS, fairseq_dir


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory, bpe_files):
    return make_model_dir(tmp_path_factory.mktemp("loading") / "model", bpe_files, labels=["neg", "pos"])


def test_a_fine_tuned_folder_loads_with_its_labels_and_head(fine_tuned):
    hub = roberta_ext.from_pretrained(str(fine_tuned))  # data_name_or_path "." finds input0/ and label/
    assert hub.labels[:2] == ["neg", "pos"]
    assert sorted(hub.model.classification_heads) == ["sentence_classification_head"]
    assert hub.model.dtype == torch.float32 and hub.model.device == torch.device("cpu")
    assert not hub.model.training  # loaded for use: eval mode, as fairseq's hub


def test_the_dtype_asked_for_is_the_models(fine_tuned):
    hub = roberta_ext.from_pretrained(str(fine_tuned), dtype="bfloat16")
    assert hub.model.dtype == torch.bfloat16
    assert hub.extract_features(hub.encode("Hello")).dtype == torch.bfloat16


def test_what_is_not_there_is_named_with_what_to_pass(fine_tuned, tmp_path):
    with pytest.raises(FileNotFoundError) as missing:
        roberta_ext.from_pretrained(str(fine_tuned), checkpoint_file="checkpoint_best.pt")
    assert str(missing.value) == (
        f"checkpoint file '{fine_tuned / 'checkpoint_best.pt'}' does not exist; '{fine_tuned}' holds model.pt: "
        "pass checkpoint_file='model.pt' (--checkpoint-file model.pt on the roberta-ext commands)"
    )
    with pytest.raises(ValueError, match=r"is not an existing directory or archive, .*known names: roberta.base, "):
        roberta_ext.from_pretrained(str(tmp_path / "absent"))


# ------------------------------------------------------------------ unit-level: the lookups, messages, placement
# (scripts/mutation/modules.toml's [loading] judges loading.py by these; each builds on the module's one folder)


@pytest.fixture(scope="module")
def plain(tmp_path_factory, bpe_files):
    """A tiny fairseq-layout folder: model.pt, dict.txt, encoder.json, vocab.bpe (read-only: copy it to change it)."""
    return make_model_dir(tmp_path_factory.mktemp("loading") / "plain", bpe_files)


@pytest.fixture
def no_downloads(monkeypatch):
    def refuse(url, *args, **kwargs):
        raise AssertionError(f"tried to download {url}")

    monkeypatch.setattr(download, "download", refuse)


def copy_of(folder: Path, where: Path) -> Path:
    shutil.copytree(folder, where)
    return where


def trained_with(checkpoint: Path, bpe: dict) -> None:
    """Give ``checkpoint`` the ``cfg.bpe`` fairseq-train records (``--bpe ... --gpt2-encoder-json ...``)."""
    state = torch.load(checkpoint, weights_only=True)
    state["cfg"]["bpe"] = bpe
    torch.save(state, checkpoint)


TEXT = "Hello world! Ünïcode 🙂"


def test_an_unknown_bpe_is_refused_before_the_folder_is_looked_up(tmp_path):
    with pytest.raises(ValueError) as refused:
        roberta_ext.from_pretrained(str(tmp_path / "absent"), bpe="nope")
    assert str(refused.value) == f"bpe='nope' is not supported; choose one of {BPE_CHOICES}"


def test_fairseq_overrides_are_named_sorted_and_nothing_is_said_without_them(plain):
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        roberta_ext.from_pretrained(str(plain), user_dir="/somewhere", arch="roberta_base")
    assert [str(w.message) for w in said] == [
        "from_pretrained ignores fairseq overrides it has no use for: ['arch', 'user_dir']"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        roberta_ext.from_pretrained(str(plain))


def test_the_hub_holds_the_checkpoints_options_and_the_model_in_eval_mode(plain):
    hub = roberta_ext.from_pretrained(str(plain))
    loaded = load_roberta_checkpoint(plain / "model.pt")
    assert hub.cfg == {"model": loaded.options, "task": loaded.task} and hub.args == loaded.options
    assert hub.labels is None and hub.task.label_dictionary is None
    assert not hub.training and not hub.model.training
    assert hub.dictionary.symbols[-1] == "<mask>" and hub.task.mask_idx == len(hub.dictionary) - 1
    assert hub.model.cfg.family == loaded.model.cfg.family == "roberta"


def test_a_folder_archive_unpacks_into_the_cache_asked_for(tmp_path, plain, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv(download.CACHE_ENV, raising=False)
    archive = tmp_path / "plain.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(plain, arcname="plain")
    hub = roberta_ext.from_pretrained(str(archive), cache_dir=tmp_path / "cache")
    assert [p.name for p in (tmp_path / "cache").rglob("model.pt")] == ["model.pt"]
    assert not (tmp_path / "home").exists()
    assert hub.decode(hub.encode(TEXT)) == TEXT


def test_a_data_folder_by_name_is_looked_up_in_the_cache_asked_for_and_offline(tmp_path, plain, no_downloads):
    with pytest.raises(download.DownloadError) as offline:
        roberta_ext.from_pretrained(
            str(plain), data_name_or_path="roberta.base", cache_dir=tmp_path / "c", offline=True
        )
    assert "roberta.base.tar.gz" in str(offline.value) and str(tmp_path / "c") in str(offline.value)


def test_a_data_path_starting_with_a_dot_is_the_model_folders_any_other_the_working_directorys(
    tmp_path, plain, monkeypatch
):
    folder = copy_of(plain, tmp_path / "m")
    (folder / "data").mkdir()
    (folder / "dict.txt").rename(folder / "data" / "dict.txt")
    monkeypatch.chdir(tmp_path)
    expected = roberta_ext.from_pretrained(str(plain)).encode(TEXT)
    assert torch.equal(roberta_ext.from_pretrained(str(folder), data_name_or_path="./data").encode(TEXT), expected)
    assert torch.equal(roberta_ext.from_pretrained(str(folder), data_name_or_path="m/data").encode(TEXT), expected)
    with pytest.raises(ValueError, match="is not an existing directory or archive"):
        roberta_ext.from_pretrained(str(folder), data_name_or_path="data")  # not ./data: the working directory's


def test_input0_dict_wins_over_the_folders_dict(tmp_path, plain):
    folder = copy_of(plain, tmp_path / "m")
    (folder / "input0").mkdir()
    (folder / "dict.txt").rename(folder / "input0" / "dict.txt")
    (folder / "dict.txt").write_text("99999 1\n")  # another model's: would be refused
    hub = roberta_ext.from_pretrained(str(folder))
    assert hub.dictionary.source == str(folder / "input0" / "dict.txt")


def test_a_dictionary_of_another_size_is_refused_with_the_counts(tmp_path, plain, bpe_files):
    folder = copy_of(plain, tmp_path / "m")
    with open(folder / "dict.txt", "a") as f:
        f.write("99999 1\n")
    symbols = len((folder / "dict.txt").read_text().splitlines())
    rows = len(Dictionary.load(bpe_files.dict_txt)) + 1
    with pytest.raises(CheckpointError) as refused:
        roberta_ext.from_pretrained(str(folder))
    assert str(refused.value) == (
        f"'{folder / 'dict.txt'}' has {symbols} symbols, giving {symbols + 5} with the 4 specials and <mask>, but "
        f"the embedding matrix of '{folder / 'model.pt'}' has {rows} rows: this dictionary does not belong to this "
        "model"
    )


def test_no_dictionary_names_both_places_it_looked(tmp_path, plain):
    folder = copy_of(plain, tmp_path / "m")
    (folder / "dict.txt").unlink()
    with pytest.raises(FileNotFoundError) as missing:
        roberta_ext.from_pretrained(str(folder))
    assert str(missing.value) == (
        f"no dictionary found: looked for '{folder / 'input0' / 'dict.txt'}' and '{folder / 'dict.txt'}'"
    )


def test_the_checkpoint_to_pass_is_checkpoint_best_else_the_first_by_name(tmp_path, plain):
    folder = copy_of(plain, tmp_path / "m")
    (folder / "model.pt").rename(folder / "checkpoint_last.pt")
    (folder / "checkpoint_1.pt").mkdir()  # a folder is not a checkpoint
    with pytest.raises(FileNotFoundError) as missing:
        roberta_ext.from_pretrained(str(folder))
    assert str(missing.value) == (
        f"checkpoint file '{folder / 'model.pt'}' does not exist; '{folder}' holds checkpoint_last.pt: pass "
        "checkpoint_file='checkpoint_last.pt' (--checkpoint-file checkpoint_last.pt on the roberta-ext commands)"
    )
    shutil.copy(folder / "checkpoint_last.pt", folder / "checkpoint_best.pt")
    shutil.copy(folder / "checkpoint_last.pt", folder / "checkpoint_0.pt")
    with pytest.raises(FileNotFoundError) as missing:
        roberta_ext.from_pretrained(str(folder))
    assert str(missing.value) == (
        f"checkpoint file '{folder / 'model.pt'}' does not exist; '{folder}' holds checkpoint_0.pt, "
        "checkpoint_best.pt, checkpoint_last.pt: pass checkpoint_file='checkpoint_best.pt' (--checkpoint-file "
        "checkpoint_best.pt on the roberta-ext commands)"
    )
    for name in ("checkpoint_best.pt", "checkpoint_last.pt", "checkpoint_0.pt"):
        (folder / name).unlink()
    with pytest.raises(FileNotFoundError) as missing:
        roberta_ext.from_pretrained(str(folder))
    assert str(missing.value) == f"checkpoint file '{folder / 'model.pt'}' does not exist, and '{folder}' holds no *.pt"


def test_a_fairseq_checkpoint_wins_over_a_transformers_folder_beside_it(tmp_path, plain):
    folder = roberta_ext.from_pretrained(str(plain)).save_transformers(tmp_path / "hf")
    as_transformers = roberta_ext.from_pretrained(str(folder), dtype="bfloat16")
    assert as_transformers.cfg["model"]["_name"] == "RobertaForMaskedLM" and as_transformers.cfg["task"] == {}
    assert as_transformers.model.dtype == torch.bfloat16 and not as_transformers.model.training
    for name in ("model.pt", "dict.txt", "encoder.json", "vocab.bpe"):
        shutil.copy(plain / name, folder / name)
    as_fairseq = roberta_ext.from_pretrained(str(folder))
    loaded = load_roberta_checkpoint(plain / "model.pt")
    assert as_fairseq.cfg == {"model": loaded.options, "task": loaded.task} and loaded.task["_name"] == "masked_lm"
    assert roberta_ext.from_pretrained(str(folder), checkpoint_file="other.pt").cfg == as_transformers.cfg


def test_a_sentence_transformers_folder_is_read_as_such_unless_a_checkpoint_is_there(tmp_path, plain):
    root = tmp_path / "st"
    roberta_ext.from_pretrained(str(plain)).save_transformers(root / "0_Transformer")
    (root / "modules.json").write_text(
        '[{"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},'
        ' {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]'
    )
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    hub = roberta_ext.from_pretrained(str(root), dtype=torch.float16)
    assert hub.sentence_embedding.pooling == ("cls",) and hub.model.dtype == torch.float16
    for name in ("model.pt", "dict.txt", "encoder.json", "vocab.bpe"):
        shutil.copy(plain / name, root / name)
    assert roberta_ext.from_pretrained(str(root)).sentence_embedding.pooling == ("mean",)
    shutil.rmtree(root / "0_Transformer")
    (root / "0_Transformer").mkdir()
    with pytest.raises(CheckpointError) as refused:
        from_sentence_transformers(root)
    assert str(refused.value) == (
        f"'{root / '0_Transformer'}': the Transformer module of '{root / 'modules.json'}' has no config.json and "
        "weights (model.safetensors or pytorch_model.bin)"
    )


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A tiny BERT folder as fairseq-train leaves it (dict.txt of WordPiece pieces, model.pt) and its cased
    vocab.txt kept apart in ``vocab/`` (read-only)."""
    from roberta_ext.tokenizers.wordpiece import WordPieceTokenizer, train_wordpiece_vocab, write_vocab

    root = tmp_path_factory.mktemp("bert")
    vocab = root / "vocab" / "vocab.txt"
    vocab.parent.mkdir()
    write_vocab(train_wordpiece_vocab(CORPUS, vocab_size=120, do_lower_case=False), vocab)
    wordpiece = WordPieceTokenizer.from_file(vocab, do_lower_case=False)
    fairseq_dir(root / "model", [wordpiece.tokenize(line) for line in CORPUS], "bert-tiny")
    return root


def test_a_transformers_folder_whose_tokenizer_does_not_fit_is_refused(tmp_path, bert):
    folder = roberta_ext.from_pretrained(
        str(bert / "model"), bpe="bert", bpe_vocab_file=bert / "vocab" / "vocab.txt", bpe_cased=True
    ).save_transformers(tmp_path / "hf")
    tokens = len(roberta_ext.from_transformers(folder).dictionary)
    with open(folder / "vocab.txt", "a", encoding="utf-8") as f:
        f.write("an-extra-token\n")
    (folder / "tokenizer.json").unlink(missing_ok=True)
    with pytest.raises(CheckpointError) as refused:
        roberta_ext.from_transformers(folder)
    assert str(refused.value) == (
        f"'{folder}': the tokenizer has {tokens + 1} tokens but the model's embedding has {tokens} rows"
    )


def test_a_transformers_folder_with_a_broken_json_file_is_refused_naming_it(tmp_path, plain):
    folder = roberta_ext.from_pretrained(str(plain)).save_transformers(tmp_path / "hf")
    (folder / "tokenizer_config.json").write_text("{not json", encoding="utf-8")
    try:
        json.loads("{not json")
    except ValueError as exc:
        reason = str(exc)
    with pytest.raises(CheckpointError) as refused:
        roberta_ext.from_transformers(folder)
    assert str(refused.value) == f"'{folder / 'tokenizer_config.json'}' is not valid JSON ({reason})"


# -------------------------------------------------------------------------- placement


def test_dtype_by_name_or_object_and_device_each_alone(plain):
    for dtype in ("float16", torch.float16):
        hub = roberta_ext.from_pretrained(str(plain), dtype=dtype)
        assert hub.model.dtype == torch.float16 and hub.device == torch.device("cpu")
    on_meta = roberta_ext.from_pretrained(str(plain), device="meta")
    assert on_meta.device == torch.device("meta") and on_meta.model.dtype == torch.float32


@pytest.mark.parametrize("dtype", ["int64", "nope", "bool"])
def test_a_dtype_that_is_not_floating_point_is_refused(plain, dtype):
    with pytest.raises(ValueError) as refused:
        roberta_ext.from_pretrained(str(plain), dtype=dtype)
    assert str(refused.value) == f"dtype={dtype!r} is not a floating-point torch dtype nor 'int8'"


def test_int8_quantizes_on_the_cpu_calibrated_on_the_hubs_own_batches(plain):
    from roberta_ext.export.int8 import Int8Linear, calibration_batches, quantize_int8

    hub = roberta_ext.from_pretrained(str(plain), dtype="int8", device="cpu")
    assert any(isinstance(m, Int8Linear) for m in hub.model.modules())
    assert not any(isinstance(m, torch.nn.Linear) for m in hub.model.modules())
    reference = roberta_ext.from_pretrained(str(plain))
    quantize_int8(reference.model, calibration=calibration_batches(reference.inputs))
    tokens = hub.encode(TEXT)
    torch.testing.assert_close(hub.extract_features(tokens), reference.extract_features(tokens), rtol=0, atol=0)
    with pytest.raises(ValueError) as refused:
        roberta_ext.from_pretrained(str(plain), dtype="int8", device="cuda:1")
    assert str(refused.value) == "dtype='int8' runs on the CPU only, not on device='cuda:1'"
    with pytest.raises(ValueError) as refused:
        roberta_ext.from_pretrained(str(plain), dtype="int8", compile=True)
    assert str(refused.value) == "compile=True and dtype='int8' do not combine: load with one or the other"


def test_compile_places_the_hub_first_then_serves_it_compiled(plain):
    hub = roberta_ext.from_pretrained(str(plain), dtype="bfloat16", compile=True)
    assert hub.model.dtype == torch.bfloat16 and not hub.model.training
    assert hub.model.transformer.inference_forward is not None
    assert roberta_ext.from_pretrained(str(plain)).model.transformer.inference_forward is None


# ------------------------------------------------------------ the tokenizer files: passed, trained with, found


def without_bpe_files(plain: Path, where: Path) -> Path:
    folder = copy_of(plain, where)
    for name in ("encoder.json", "vocab.bpe"):
        (folder / name).unlink()
    return folder


def test_trained_files_that_are_not_here_are_said_in_full_then_the_folders_are_used(tmp_path, plain, monkeypatch):
    folder = copy_of(plain, tmp_path / "m")
    trained_with(folder / "model.pt", {"_name": "gpt2", "gpt2_encoder_json": "bpe/e.json", "gpt2_vocab_bpe": "bpe/v"})
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        hub = roberta_ext.from_pretrained(str(folder))
    assert [str(w.message) for w in said] == [
        f"{str(folder / 'model.pt')!r} was trained with --gpt2-encoder-json 'bpe/e.json' --gpt2-vocab-bpe 'bpe/v', "
        f"which does not exist here (paths are relative to the working directory, {str(tmp_path)!r}); pass the "
        "files to from_pretrained or put them in the model folder"
    ]
    assert torch.equal(hub.encode(TEXT), roberta_ext.from_pretrained(str(plain)).encode(TEXT))


def test_one_trained_gpt2_file_without_the_other_is_no_use(tmp_path, plain, monkeypatch):
    folder = copy_of(plain, tmp_path / "m")
    (tmp_path / "bpe").mkdir()
    (tmp_path / "bpe" / "encoder.json").write_text("{not the encoder")  # would fail if it were read
    trained_with(
        folder / "model.pt", {"_name": "gpt2", "gpt2_encoder_json": "bpe/encoder.json", "gpt2_vocab_bpe": "bpe/v"}
    )
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match=r"trained with --gpt2-vocab-bpe 'bpe/v', which does not exist here \("):
        hub = roberta_ext.from_pretrained(str(folder))
    assert torch.equal(hub.encode(TEXT), roberta_ext.from_pretrained(str(plain)).encode(TEXT))
    trained_with(
        folder / "model.pt", {"_name": "gpt2", "gpt2_encoder_json": "bpe/e", "gpt2_vocab_bpe": "bpe/encoder.json"}
    )
    with pytest.warns(UserWarning, match=r"trained with --gpt2-encoder-json 'bpe/e', which does not exist here \("):
        roberta_ext.from_pretrained(str(folder))


def test_trained_urls_other_than_fairseqs_are_fetched_before_the_folders_files(tmp_path, plain, no_downloads):
    folder = copy_of(plain, tmp_path / "m")
    urls = {"gpt2_encoder_json": "http://example.com/e.json", "gpt2_vocab_bpe": "https://example.com/v.bpe"}
    trained_with(folder / "model.pt", {"_name": "gpt2", **urls})
    with pytest.raises(Exception) as fetched:
        roberta_ext.from_pretrained(str(folder), cache_dir=tmp_path / "cache")
    assert "tried to download http://example.com/e.json" in str(fetched.value)


def test_trained_options_that_name_no_file_or_no_known_bpe_are_passed_over_in_silence(tmp_path, plain, monkeypatch):
    folder = copy_of(plain, tmp_path / "m")
    (tmp_path / "bpe").mkdir()
    for name in ("encoder.json", "vocab.bpe"):
        (tmp_path / "bpe" / name).write_text("{not a BPE file")  # would fail if they were read
    monkeypatch.chdir(tmp_path)
    expected = roberta_ext.from_pretrained(str(plain)).encode(TEXT)
    for bpe in (
        {"_name": "gpt2", "gpt2_encoder_json": "", "gpt2_vocab_bpe": None, "bpe_vocab_file": 3},
        {"_name": "nope", "gpt2_encoder_json": "bpe/encoder.json", "gpt2_vocab_bpe": "bpe/vocab.bpe"},
        {"gpt2_encoder_json": "bpe/encoder.json", "gpt2_vocab_bpe": "bpe/vocab.bpe"},
    ):
        trained_with(folder / "model.pt", bpe)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert torch.equal(roberta_ext.from_pretrained(str(folder)).encode(TEXT), expected), bpe


def test_files_passed_win_over_the_trained_ones_and_a_bpe_of_another_kind_ignores_them(
    tmp_path, plain, bpe_files, monkeypatch
):
    folder = without_bpe_files(plain, tmp_path / "m")
    (tmp_path / "bpe").mkdir()
    for name in ("encoder.json", "vocab.bpe"):
        (tmp_path / "bpe" / name).write_text("{not a BPE file")
    trained_with(
        folder / "model.pt",
        {"_name": "gpt2", "gpt2_encoder_json": "bpe/encoder.json", "gpt2_vocab_bpe": "bpe/vocab.bpe"},
    )
    monkeypatch.chdir(tmp_path)
    expected = roberta_ext.from_pretrained(str(plain)).encode(TEXT)
    passed = roberta_ext.from_pretrained(
        str(folder), gpt2_encoder_json=str(bpe_files.encoder_json), gpt2_vocab_bpe=str(bpe_files.vocab_bpe)
    )
    assert torch.equal(passed.encode(TEXT), expected)
    for name in ("encoder.json", "vocab.bpe"):
        shutil.copy(plain / name, tmp_path / "bpe" / name)
    assert torch.equal(roberta_ext.from_pretrained(str(folder), bpe="gpt2").encode(TEXT), expected)
    with pytest.raises(FileNotFoundError, match="vocab.txt"):  # bert's files, not the gpt2 ones it was trained with
        roberta_ext.from_pretrained(str(folder), bpe="bert")


def test_the_model_folders_files_win_over_the_data_folders(tmp_path, plain):
    folder = copy_of(plain, tmp_path / "m")
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(plain / "dict.txt", data / "dict.txt")
    for name in ("encoder.json", "vocab.bpe"):
        (data / name).write_text("{not a BPE file")
    hub = roberta_ext.from_pretrained(str(folder), data_name_or_path=str(data))
    assert torch.equal(hub.encode(TEXT), roberta_ext.from_pretrained(str(plain)).encode(TEXT))


def test_the_trained_bpe_names_the_kind_and_its_casing(tmp_path, bert, plain):
    cased = dict(bpe="bert", bpe_vocab_file=bert / "vocab" / "vocab.txt", bpe_cased=True)
    text = "Alice lives in Paris."
    expected = roberta_ext.from_pretrained(str(bert / "model"), **cased).encode(text)
    uncased = roberta_ext.from_pretrained(str(bert / "model"), **{**cased, "bpe_cased": False}).encode(text)
    assert not torch.equal(expected, uncased)
    folder = copy_of(bert / "model", tmp_path / "m")
    trained_with(
        folder / "model.pt", {"_name": "bert", "bpe_vocab_file": str(bert / "vocab" / "vocab.txt"), "bpe_cased": 1}
    )
    assert torch.equal(roberta_ext.from_pretrained(str(folder)).encode(text), expected)
    trained_with(folder / "model.pt", {"_name": "bert", "bpe_vocab_file": str(bert / "vocab" / "vocab.txt")})
    assert torch.equal(roberta_ext.from_pretrained(str(folder)).encode(text), uncased)
    # --bpe bert and no file named: the folder's vocab.txt, though GPT-2's files are there too
    trained_with(folder / "model.pt", {"_name": "bert", "bpe_cased": True})
    shutil.copy(bert / "vocab" / "vocab.txt", folder / "vocab.txt")
    for name in ("encoder.json", "vocab.bpe"):
        shutil.copy(plain / name, folder / name)
    assert torch.equal(roberta_ext.from_pretrained(str(folder)).encode(text), uncased)


@functools.cache
def _sentencepiece_model() -> bytes:
    """A SentencePiece model with its defaults (XLM-R's), trained once per process: mutmut's forked children take the
    bytes their parent trained (SentencePiece's trainer deadlocks in them, docs/mutation.md)."""
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=model, vocab_size=60, hard_vocab_limit=False, num_threads=1
    )
    return model.getvalue()


def _sentencepiece_files(model_file: Path, dict_txt: Path) -> tuple[Dictionary, Any]:
    """XLM-R's pair of files: the SentencePiece model written to ``model_file`` and, at ``dict_txt``, the dictionary
    of the pieces it cuts CORPUS into. Returns that dictionary and the model, loaded."""
    import sentencepiece as spm

    model_file.write_bytes(_sentencepiece_model())
    pieces = spm.SentencePieceProcessor(model_file=str(model_file))
    dictionary = Dictionary()
    for line in CORPUS:
        for piece in pieces.encode(line, out_type=str):
            dictionary.add_symbol(piece)
    dictionary.save(dict_txt)
    return dictionary, pieces


def test_a_checkpoint_without_a_family_beside_xlmrs_tokenizer_is_xlmr(tmp_path):
    """fairseq's XLM-R checkpoints are RoBERTa checkpoints that name no family; ours name theirs."""
    folder = tmp_path / "xlmr"
    folder.mkdir()
    dictionary, pieces = _sentencepiece_files(folder / "sentencepiece.bpe.model", folder / "dict.txt")
    torch.manual_seed(0)
    save_roberta_checkpoint(RobertaModel(preset("tiny", vocab_size=len(dictionary) + 1)), folder / "model.pt")
    assert roberta_ext.from_pretrained(str(folder)).model.cfg.family == "roberta"
    state = torch.load(folder / "model.pt", weights_only=True)
    del state["cfg"]["model"]["family"]
    torch.save(state, folder / "model.pt")
    hub = roberta_ext.from_pretrained(str(folder))
    assert hub.model.cfg.family == "xlmr"
    text = "Alice lives in Paris"
    assert hub.encode(text).tolist() == [0, *(dictionary.index(p) for p in pieces.encode(text, out_type=str)), 2]


def test_a_transformers_folder_encodes_as_the_fairseq_folder_it_came_from_from_either_tokenizer_file(tmp_path, plain):
    """transformers 5 writes only ``tokenizer.json``; its ``model`` part is the same BPE as vocab.json + merges.txt."""
    fairseq = roberta_ext.from_pretrained(str(plain))
    folder = fairseq.save_transformers(tmp_path / "hf")
    expected = fairseq.encode(TEXT, "and a pair")
    assert torch.equal(roberta_ext.from_transformers(folder).encode(TEXT, "and a pair"), expected)
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    merges = [line.split(" ") for line in (folder / "merges.txt").read_text(encoding="utf-8").splitlines()[1:]]
    fast = {"model": {"type": "BPE", "vocab": vocab, "merges": merges}}
    (folder / "tokenizer.json").write_text(json.dumps(fast), encoding="utf-8")
    (folder / "vocab.json").unlink()
    (folder / "merges.txt").unlink()
    assert torch.equal(roberta_ext.from_transformers(folder).encode(TEXT, "and a pair"), expected)


def test_a_transformers_folder_naming_the_generic_fast_tokenizer_is_read_by_the_tokenizers_library(tmp_path, plain):
    """``tokenizer_config.json`` naming ``PreTrainedTokenizerFast``: its ``tokenizer.json`` is the tokenizer (here the
    fairseq folder's BPE with RoBERTa's template, ``<s> a </s> </s> b </s>``), read by the library, not vocab.json."""
    tokenizers = require("tokenizers", "the tokenizers library reads tokenizer.json")
    fairseq = roberta_ext.from_pretrained(str(plain))
    folder = fairseq.save_transformers(tmp_path / "hf")
    first: dict[int, str] = {}  # the exported <unk> fillers share <unk>'s id: keep each id's first token
    for token, index in json.loads((folder / "vocab.json").read_text(encoding="utf-8")).items():
        first.setdefault(index, token)
    vocab = {token: index for index, token in first.items()}
    lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()[1:]
    merges = [(a, b) for a, b in (line.split(" ") for line in lines) if a in vocab and b in vocab and a + b in vocab]
    library = tokenizers.Tokenizer(tokenizers.models.BPE(vocab, merges, unk_token="<unk>"))
    library.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    library.decoder = tokenizers.decoders.ByteLevel()
    library.post_processor = tokenizers.processors.RobertaProcessing(("</s>", vocab["</s>"]), ("<s>", vocab["<s>"]))
    library.save(str(folder / "tokenizer.json"))
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "PreTrainedTokenizerFast"}))
    hub = roberta_ext.from_transformers(folder)
    assert isinstance(hub.tokenizer, HFTokenizer)
    assert hub.encode(TEXT, "and a pair").tolist() == library.encode(TEXT, "and a pair").ids
    assert torch.equal(hub.encode(TEXT, "and a pair"), fairseq.encode(TEXT, "and a pair"))


def test_the_sentencepiece_model_a_checkpoint_was_trained_with_is_used(tmp_path):
    folder = tmp_path / "xlmr"
    folder.mkdir()
    dictionary, pieces = _sentencepiece_files(tmp_path / "sentencepiece.bpe.model", folder / "dict.txt")
    save_roberta_checkpoint(RobertaModel(preset("tiny", vocab_size=len(dictionary) + 1)), folder / "model.pt")
    trained_with(
        folder / "model.pt",
        {"_name": "sentencepiece", "sentencepiece_model": str(tmp_path / "sentencepiece.bpe.model")},
    )
    text = "Alice lives in Paris"
    expected = [0, *(dictionary.index(p) for p in pieces.encode(text, out_type=str)), 2]
    assert roberta_ext.from_pretrained(str(folder)).encode(text).tolist() == expected
    trained_with(folder / "model.pt", {})
    passed = str(tmp_path / "sentencepiece.bpe.model")
    hub = roberta_ext.from_pretrained(str(folder), bpe="sentencepiece", sentencepiece_model=passed)
    assert hub.encode(text).tolist() == expected


def test_a_known_name_offline_and_not_cached_is_refused_without_a_download(tmp_path, no_downloads):
    with pytest.raises(download.DownloadError) as offline:
        roberta_ext.from_pretrained("roberta.base", cache_dir=tmp_path / "c", offline=True)
    assert "roberta.base.tar.gz" in str(offline.value) and str(tmp_path / "c") in str(offline.value)


def test_bpe_urls_passed_are_fetched_into_the_cache_asked_for_and_not_offline(tmp_path, plain, no_downloads):
    folder = without_bpe_files(plain, tmp_path / "m")
    urls = dict(gpt2_encoder_json="https://example.com/e.json", gpt2_vocab_bpe="https://example.com/v.bpe")
    with pytest.raises(download.DownloadError) as offline:
        roberta_ext.from_pretrained(str(folder), cache_dir=tmp_path / "c", offline=True, **urls)
    assert "https://example.com/e.json" in str(offline.value) and str(tmp_path / "c") in str(offline.value)


def test_the_data_folders_bpe_files_are_found_for_a_checkpoint_that_names_none(tmp_path, plain):
    folder = copy_of(plain, tmp_path / "m")
    data = tmp_path / "data"
    data.mkdir()
    for name in ("encoder.json", "vocab.bpe", "dict.txt"):
        (folder / name).rename(data / name)
    assert load_roberta_checkpoint(folder / "model.pt").bpe == {}
    hub = roberta_ext.from_pretrained(str(folder), data_name_or_path=str(data))
    assert torch.equal(hub.encode(TEXT), roberta_ext.from_pretrained(str(plain)).encode(TEXT))


def test_transformers_and_sentence_transformers_folders_are_placed_and_compiled_as_asked(tmp_path, plain):
    folder = roberta_ext.from_pretrained(str(plain)).save_transformers(tmp_path / "st" / "0_Transformer")
    assert roberta_ext.from_pretrained(str(folder), device="meta").device == torch.device("meta")
    compiled = roberta_ext.from_pretrained(str(folder), compile=True)
    assert compiled.model.transformer.inference_forward is not None
    root = tmp_path / "st"
    (root / "modules.json").write_text(
        '[{"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},'
        ' {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]'
    )
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    assert roberta_ext.from_pretrained(str(root), device="meta").device == torch.device("meta")
    compiled = roberta_ext.from_pretrained(str(root), compile=True)
    assert compiled.model.transformer.inference_forward is not None


def test_no_tokenizer_files_anywhere_falls_back_to_the_familys_which_this_dictionary_refuses(
    tmp_path, plain, no_downloads
):
    folder = without_bpe_files(plain, tmp_path / "m")
    with pytest.raises(FileNotFoundError, match=r"pass gpt2_encoder_json= and gpt2_vocab_bpe= \(--gpt2-encoder-json"):
        roberta_ext.from_pretrained(str(folder), cache_dir=tmp_path / "c")


def test_the_bpe_named_looks_for_its_own_files_in_the_data_folder_past_other_kinds_files(tmp_path, bert, plain):
    folder = copy_of(bert / "model", tmp_path / "m")
    for name in ("encoder.json", "vocab.bpe"):
        shutil.copy(plain / name, folder / name)  # GPT-2's files beside the model: not what bpe="bert" reads
    data = tmp_path / "data"
    data.mkdir()
    (folder / "dict.txt").rename(data / "dict.txt")
    shutil.copy(bert / "vocab" / "vocab.txt", data / "vocab.txt")
    text = "Alice lives in Paris."
    expected = roberta_ext.from_pretrained(
        str(bert / "model"), bpe="bert", bpe_vocab_file=bert / "vocab" / "vocab.txt"
    ).encode(text)
    hub = roberta_ext.from_pretrained(str(folder), data_name_or_path=str(data), bpe="bert")
    assert torch.equal(hub.encode(text), expected)


def test_compile_places_the_hub_on_the_device_asked_for(plain):
    hub = roberta_ext.from_pretrained(str(plain), device="meta", compile=True)
    assert hub.device == torch.device("meta") and hub.model.transformer.inference_forward is not None


# ------------------------------------------------------------------ outside mutmut's reach
# (its trampolines add stack frames, so [loading] in scripts/mutation/modules.toml leaves this test out)


def test_the_warnings_name_the_callers_file(tmp_path, plain, monkeypatch):
    """Both of from_pretrained's warnings point at the line that called it (their ``stacklevel``)."""
    folder = copy_of(plain, tmp_path / "m")
    trained_with(folder / "model.pt", {"_name": "gpt2", "gpt2_encoder_json": "bpe/e.json", "gpt2_vocab_bpe": "bpe/v"})
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        roberta_ext.from_pretrained(str(folder), user_dir="/somewhere")
    assert [str(w.message).split(" ")[:3] for w in said] == [
        ["from_pretrained", "ignores", "fairseq"],
        [repr(str(folder / "model.pt")), "was", "trained"],
    ]
    assert [w.filename for w in said] == [__file__, __file__]
