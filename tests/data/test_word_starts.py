"""roberta_ext.data.word_starts: which dictionary entries start a word, for whole-word and span
masking — GPT-2 BPE against fairseq's ``get_whole_word_mask``, WordPiece and SentencePiece by
their markers."""

from __future__ import annotations

import doctest
from argparse import Namespace

import torch

from roberta_ext.data import word_starts
from roberta_ext.data.word_starts import gpt2_word_starts, piece_word_starts
from roberta_ext.tokenizers import GPT2BPE, Dictionary
from tests.peers import require


def test_gpt2_word_starts_are_tokens_with_a_leading_space(bpe_files):
    dictionary = Dictionary.load(bpe_files.dict_txt)
    dictionary.add_symbol("madeupword0000", n=0)
    starts = gpt2_word_starts(dictionary, str(bpe_files.encoder_json), str(bpe_files.vocab_bpe))
    assert starts.shape == (len(dictionary),) and starts.dtype == torch.bool
    assert starts[: dictionary.nspecial].all() and starts[-1]  # specials and fillers start words
    bpe = GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe)
    word = bpe.encode(" unbelievable")  # one word, several tokens: only the first starts it
    indices = [dictionary.index(str(t)) for t in word]
    assert len(indices) > 1 and starts[indices].tolist() == [True] + [False] * (len(indices) - 1)
    assert 0.1 < starts.float().mean() < 0.9


def test_gpt2_word_starts_equal_fairseqs_whole_word_mask(bpe_files):
    utils = require("fairseq.data.encoders.utils", "fairseq's get_whole_word_mask is the peer")
    fairseq_data = require("fairseq.data")
    dictionary = fairseq_data.Dictionary.load(str(bpe_files.dict_txt))
    dictionary.add_symbol("<mask>")
    args = Namespace(bpe="gpt2", gpt2_encoder_json=str(bpe_files.encoder_json), gpt2_vocab_bpe=str(bpe_files.vocab_bpe))
    theirs = utils.get_whole_word_mask(args, dictionary).bool()
    ours = gpt2_word_starts(dictionary, str(bpe_files.encoder_json), str(bpe_files.vocab_bpe))
    assert torch.equal(ours, theirs)


def test_piece_word_starts_follow_the_markers():
    dictionary = Dictionary()
    for symbol in ["the", "un", "##break", "##able", "▁x", "stone"]:
        dictionary.add_symbol(symbol)
    wordpiece = piece_word_starts(dictionary, "wordpiece")
    sentencepiece = piece_word_starts(dictionary, "sentencepiece")
    assert wordpiece.tolist() == [True] * 4 + [True, True, False, False, True, True]
    assert sentencepiece.tolist() == [True] * 4 + [False, False, False, False, True, False]


def test_doctests():
    assert doctest.testmod(word_starts).failed == 0
