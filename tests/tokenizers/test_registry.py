"""The tokenizer registry (roberta_ext/tokenizers/registry.py): which kind a model folder and
the caller's arguments choose, and the refusal to pair fairseq's default GPT-2 BPE with a
dictionary of another BPE."""

from __future__ import annotations

from pathlib import Path

import pytest

from roberta_ext.tokenizers import Dictionary
from roberta_ext.tokenizers.registry import (
    GPT2_IDS,
    KINDS,
    TokenizerFiles,
    choose_kind,
    get_kind,
    kind_for_folder,
    kinds_named,
)


def folder_with(tmp_path: Path, *names: str) -> Path:
    for name in names:
        (tmp_path / name).write_bytes(b"")
    return tmp_path


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (("encoder.json", "vocab.bpe"), "gpt2"),
        (("encoder.json", "vocab.bpe", "vocab.txt"), "gpt2"),  # GPT-2 BPE first, as documented
        (("vocab.txt", "spiece.model"), "wordpiece"),
        (("spiece.model",), "sentencepiece"),
        (("sentencepiece.bpe.model",), "xlmr_sentencepiece"),
        (("encoder.json",), "wordpiece"),  # half of GPT-2's files announce nothing: the default
        ((), "wordpiece"),
    ],
)
def test_a_folder_chooses_its_kind_by_its_files_else_the_familys(tmp_path, files, expected):
    assert kind_for_folder(folder_with(tmp_path, *files), TokenizerFiles(), "wordpiece").name == expected


def test_files_the_caller_names_win_over_the_folders(tmp_path):
    folder = folder_with(tmp_path, "encoder.json", "vocab.bpe")
    named = TokenizerFiles(bpe_vocab_file=str(tmp_path / "elsewhere.txt"))
    assert kind_for_folder(folder, named, "gpt2").name == "wordpiece"
    assert choose_kind("bert", folder, TokenizerFiles(), "gpt2").name == "wordpiece"  # bpe= names it


def test_fairseqs_sentencepiece_means_xlmrs_or_albert_by_the_files(tmp_path):
    assert [kind.name for kind in kinds_named("sentencepiece")] == ["sentencepiece", "xlmr_sentencepiece"]
    xlmr = tmp_path / "x"
    xlmr.mkdir()
    assert choose_kind(
        "sentencepiece", folder_with(xlmr, "sentencepiece.bpe.model"), TokenizerFiles(), "gpt2"
    ).name == ("xlmr_sentencepiece")
    albert = tmp_path / "a"
    albert.mkdir()
    assert choose_kind("sentencepiece", folder_with(albert, "spiece.model"), TokenizerFiles(), "gpt2").name == (
        "sentencepiece"
    )


def test_an_unknown_bpe_names_the_choices():
    with pytest.raises(ValueError, match=r"bpe='char' is not supported; choose one of \('gpt2', 'bert'"):
        get_kind("char")


def gpt2_dictionary() -> Dictionary:
    dictionary = Dictionary()
    for gpt2_id in sorted(GPT2_IDS):
        dictionary.add_symbol(str(gpt2_id))
    return dictionary


def test_the_default_bpe_offline_is_one_line_naming_the_options(tmp_path):
    """GPT-2's own dictionary, offline and nothing cached: one line naming the options to pass,
    not a chained download traceback."""
    files = TokenizerFiles(cache_dir=tmp_path / "empty-cache", offline=True)
    with pytest.raises(FileNotFoundError, match="offline mode is on.*pass gpt2_encoder_json=") as raised:
        KINDS["gpt2"].for_fairseq(tmp_path, gpt2_dictionary(), files)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_the_default_bpe_is_refused_over_a_dictionary_of_another_bpe(tmp_path, bpe_files):
    own = Dictionary.load(bpe_files.dict_txt)  # roberta-ext train-bpe's: ids of its own BPE
    with pytest.raises(FileNotFoundError, match=r"dict\.txt'.*not GPT-2's 50257.*--gpt2-encoder-json"):
        KINDS["gpt2"].for_fairseq(tmp_path, own, TokenizerFiles(cache_dir=tmp_path / "c", offline=True))
