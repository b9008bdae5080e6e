"""The BPE trainer: its files are valid GPT-2 vocabularies that our encoder and fairseq's
read alike, and encoding a training word replays the merges learned for it."""

from __future__ import annotations

import json

import pytest

from roberta_ext.tokenizers import GPT2BPE, ReferenceGPT2BPE
from roberta_ext.tokenizers.bpe_trainer import END_OF_TEXT, count_words, train_bpe, write_bpe_files
from tests.bpe_fixtures import UNICODE_SAMPLES
from tests.peers import require

CORPUS = list(UNICODE_SAMPLES) * 3 + ["the lower the lowest, the newer the newest"] * 5


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    directory = tmp_path_factory.mktemp("bpe")
    encoder, merges = train_bpe(count_words(CORPUS), num_merges=300)
    write_bpe_files(encoder, merges, directory / "encoder.json", directory / "vocab.bpe")
    return directory, encoder, merges


def test_format_matches_gpt2(trained):
    directory, encoder, merges = trained
    lines = (directory / "vocab.bpe").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "#version: 0.2" and len(lines) == len(merges) + 1
    on_disk = json.loads((directory / "encoder.json").read_text(encoding="utf-8"))
    assert on_disk == encoder
    assert sorted(encoder.values()) == list(range(len(encoder)))
    assert encoder[END_OF_TEXT] == len(encoder) - 1
    assert encoder["!"] == 0  # GPT-2's byte order: printable bytes first


def test_training_is_deterministic():
    assert train_bpe(count_words(CORPUS), 100) == train_bpe(count_words(CORPUS), 100)


def test_merges_are_learned_by_frequency():
    _, merges = train_bpe(count_words(["aaab aab ab"] * 2), num_merges=2)
    assert merges[0] in {("a", "a"), ("a", "b")}


def test_min_frequency_stops_training():
    _, merges = train_bpe(count_words(["abc"]), num_merges=10, min_frequency=2)
    assert merges == []


def test_our_encoders_and_fairseqs_read_the_files_and_agree(trained):
    directory, *_ = trained
    fast = GPT2BPE.from_files(directory / "encoder.json", directory / "vocab.bpe")
    reference = ReferenceGPT2BPE.from_files(directory / "encoder.json", directory / "vocab.bpe")
    for text in CORPUS[:10]:
        assert fast.encode(text) == reference.encode(text)
        assert fast.decode(fast.encode(text)) == text
    gpt2_bpe_utils = require("fairseq.data.encoders.gpt2_bpe_utils", "fairseq's GPT-2 encoder is the peer")
    peer = gpt2_bpe_utils.get_encoder(str(directory / "encoder.json"), str(directory / "vocab.bpe"))
    for text in CORPUS[:10]:
        assert fast.encode(text) == peer.encode(text)


def test_frequent_training_words_become_single_tokens(trained):
    directory, encoder, _ = trained
    fast = GPT2BPE.from_files(directory / "encoder.json", directory / "vocab.bpe")
    assert fast.encode(" the") == [encoder["Ġthe"]]
