"""Exact tokens, ids and messages of ``roberta_ext.tokenizers.wordpiece`` on a tiny vocabulary, against transformers.

The property tests of ``test_wordpiece.py`` compare whole vocabularies on arbitrary text; these pin
what those leave loose: each option alone against transformers 5's ``BertTokenizer`` and its
Python ``BertTokenizerLegacy``, the full text of every message, the greedy loop's edges, the
bounded character tables, decoding, and the trainer's merges counted by hand.
"""

from __future__ import annotations

import errno
import re
from collections import Counter

import pytest

from roberta_ext.tokenizers import wordpiece
from roberta_ext.tokenizers.wordpiece import (
    BERT_SPECIAL_TOKENS,
    BasicTokenizer,
    BertPreTokenizer,
    WordPiece,
    WordPieceFormatError,
    WordPieceTokenizer,
    read_vocab,
    train_wordpiece_vocab,
    write_vocab,
)
from tests.peers import require
from tests.tokenizers.test_wordpiece import assert_pre_tokenizer_equals_tokenizers, v4_lowercase

pytestmark = pytest.mark.usefixtures("tqdm_lock_of_this_process")

legacy_bert = require("transformers.models.bert.tokenization_bert_legacy", "transformers' BERT tokenizer is the peer")
require("tokenizers", "HF tokenizers runs transformers 5's BertTokenizer")

TINY = [
    *BERT_SPECIAL_TOKENS,
    "un",
    "##aff",
    "##able",
    "aff",
    "able",
    "!",
    ",",
    ".",
    "'",
    "s",
    "t",
    "don",
    "##t",
    "a",
    "##b",
    "##",
    "x",
    "##x",
    "##xx",
    "中",
    "文",
    "cafe",
    "café",
    "Cafe",
    "Café",
    "CAFE",
    "[",
    "]",
    "mask",
    "σ",
    "ς",
    "Σ",
    "e",
    "##\u0301",
    "\u0301",
]
TEXTS = (
    "UNaffable!! don't [MASK] able",
    "Café CAFE cafe café",
    "中文x中 文",
    "ΑΣ σ Σ",
    "e\u0301 un\u0301aff",
    "xxxx xxx ##x ## a##b",
    "a\x00b\tun\u00a0aff \ufffd[SEP]",
    "[mask] [MA\x00SK] [ MASK]",
)
OPTIONS = [
    {},
    {"do_lower_case": False},
    {"strip_accents": False},
    {"strip_accents": True},
    {"do_lower_case": False, "strip_accents": True},
    {"tokenize_chinese_chars": False},
]


@pytest.fixture(autouse=True)
def fresh_character_tables():
    """The module's shared character tables start empty: mutmut forks each mutant from a process whose
    tables the unmutated code filled, and a character found there is never classified again."""
    tables = [*wordpiece._CLEAN_TABLES.values(), *wordpiece._NORMALIZE_TABLES.values()]
    for table in (*tables, wordpiece._PUNCTUATION, wordpiece._NFD_UNKNOWN):
        table.clear()


def message(text: str) -> str:
    return re.escape(text) + "$"


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "vocab.txt"
    write_vocab(TINY, path)
    return path


@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize("text", TEXTS)
def test_each_option_gives_the_tokens_of_bert_tokenizer(options, text, tiny_file):
    from transformers import BertTokenizer

    peer = BertTokenizer(str(tiny_file), **options)
    ours = WordPieceTokenizer(TINY, **options)
    assert ours.tokenize(text) == peer.tokenize(text)
    assert ours.encode(text) == peer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize("text", TEXTS)
def test_each_option_gives_the_tokens_of_the_python_bert_tokenizer(options, text, tiny_file):
    peer = legacy_bert.BertTokenizerLegacy(str(tiny_file), **options)
    ours = WordPieceTokenizer(TINY, legacy=True, **options)
    assert ours.tokenize(text) == peer.tokenize(v4_lowercase(peer, text))
    assert ours.encode(text) == peer.encode(v4_lowercase(peer, text), add_special_tokens=False)


# ------------------------------------------------------------------------------------- messages


def test_a_missing_vocab_file_is_named_with_its_errno(tmp_path):
    path = tmp_path / "vocab.txt"
    with pytest.raises(FileNotFoundError) as caught:
        WordPieceTokenizer.from_file(path)
    assert (caught.value.errno, caught.value.filename) == (errno.ENOENT, str(path))
    assert str(caught.value) == f"[Errno 2] WordPiece vocabulary (vocab.txt) not found: '{path}'"
    assert caught.value.__suppress_context__


def test_a_vocab_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("[UNK]\ncaf\xe9\n".encode("latin-1"))
    reason = "'utf-8' codec can't decode byte 0xe9 in position 9: invalid continuation byte"
    with pytest.raises(WordPieceFormatError, match=message(f"{path}: not valid UTF-8 ({reason})")) as caught:
        read_vocab(path)
    assert caught.value.__suppress_context__


def test_an_empty_vocab_file(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    with pytest.raises(
        WordPieceFormatError, match=message(f"{path}: the vocabulary is empty (expected one token per line)")
    ):
        WordPieceTokenizer.from_file(path)


def test_an_empty_token_list():
    with pytest.raises(WordPieceFormatError, match=message("WordPiece vocabulary: the vocabulary is empty")):
        WordPieceTokenizer([])


def test_a_duplicate_token_names_both_lines_and_ids(tmp_path):
    path = tmp_path / "vocab.txt"
    write_vocab([*BERT_SPECIAL_TOKENS, "hello", "world"], path)
    path.write_text(path.read_text("utf-8") + "hello\n", "utf-8")
    expected = f"{path}: token 'hello' appears twice, on lines 6 and 8 (ids 5 and 7); each token must appear once"
    with pytest.raises(WordPieceFormatError, match=message(expected)):
        WordPieceTokenizer.from_file(path)


def test_a_token_that_is_not_a_string():
    with pytest.raises(TypeError, match=message("WordPiece vocabulary: tokens are str, got int 5 at id 1")):
        WordPieceTokenizer(["[PAD]", 5])


def test_a_vocabulary_without_special_tokens_names_each_role():
    expected = (
        "WordPiece vocabulary: lacks the unk token '[UNK]', cls token '[CLS]', sep token '[SEP]', pad token "
        "'[PAD]', mask token '[MASK]'; BERT vocabularies start with [PAD], [UNK], [CLS], [SEP], [MASK] "
        "(or pass the names this one uses)"
    )
    with pytest.raises(WordPieceFormatError, match=message(expected)):
        WordPieceTokenizer(["a"])


def test_every_missing_special_token_is_named_in_one_message():
    expected = (
        "mine: lacks the unk token '[UNK]', mask token '<mask>'; BERT vocabularies start with "
        "[PAD], [UNK], [CLS], [SEP], [MASK] (or pass the names this one uses)"
    )
    with pytest.raises(WordPieceFormatError, match=message(expected)):
        WordPieceTokenizer(["[PAD]", "[CLS]", "[SEP]", "[MASK]"], mask_token="<mask>", source="mine")


@pytest.mark.parametrize(
    "tokens, expected",
    [
        ([], "tokens to write: the vocabulary is empty"),
        (
            ["a", "b", "a"],
            "tokens to write: token 'a' appears twice, on lines 1 and 3 (ids 0 and 2); each token must appear once",
        ),
        (["a", "b\nc"], "cannot write token 'b\\nc' to {path}: it contains a line break"),
        (["a", "b\rc"], "cannot write token 'b\\rc' to {path}: it contains a line break"),
    ],
)
def test_write_vocab_refuses_with_a_message(tokens, expected, tmp_path):
    path = tmp_path / "vocab.txt"
    with pytest.raises(ValueError, match=message(expected.format(path=path))) as caught:
        write_vocab(tokens, path)
    assert type(caught.value) is ValueError
    assert list(tmp_path.iterdir()) == []


def test_write_vocab_writes_utf8_lines_ending_in_newline(tmp_path):
    path = tmp_path / "vocab.txt"
    write_vocab(iter(["[PAD]", "café", " x ", "##b", "XX"]), path)
    assert path.read_bytes() == "[PAD]\ncafé\n x \n##b\nXX\n".encode()
    assert read_vocab(path) == ["[PAD]", "café", " x ", "##b", "XX"]


@pytest.mark.parametrize("token_id", [-1, len(TINY), len(TINY) + 5])
def test_id_to_token_out_of_range(token_id):
    tok = WordPieceTokenizer(TINY, source="tiny")
    with pytest.raises(IndexError, match=message(f"token id {token_id} is out of range for tiny ({len(TINY)} tokens)")):
        tok.id_to_token(token_id)


def test_lookups_at_both_ends_of_the_vocabulary():
    tok = WordPieceTokenizer(TINY)
    assert (tok.id_to_token(0), tok.id_to_token(len(TINY) - 1)) == (TINY[0], TINY[-1])
    assert tok.token_to_id(TINY[-1]) == len(TINY) - 1
    with pytest.raises(KeyError) as caught:
        tok.token_to_id("nope")
    assert caught.value.args == ("token 'nope' is not in WordPiece vocabulary",)
    assert caught.value.__suppress_context__


def test_special_ids_follow_the_names_passed():
    tokens = ["a", "<mask>", "<pad>", "</s>", "<s>", "<unk>"]
    tok = WordPieceTokenizer(
        tokens, unk_token="<unk>", cls_token="<s>", sep_token="</s>", pad_token="<pad>", mask_token="<mask>"
    )
    assert (tok.unk_id, tok.cls_id, tok.sep_id, tok.pad_id, tok.mask_id, tok.vocab_size) == (5, 4, 3, 2, 1, 6)
    assert (tok.unk_token, tok.cls_token, tok.sep_token, tok.pad_token, tok.mask_token) == (
        "<unk>",
        "<s>",
        "</s>",
        "<pad>",
        "<mask>",
    )
    assert tok.tokenize("a b <s>") == ["a", "<unk>", "<s>"]
    assert tok.wordpiece.tokenize("a b") == ["a", "<unk>"]
    assert (tok.wordpiece.unk_token, tok.wordpiece.max_input_chars_per_word) == ("<unk>", 100)


def test_from_file_passes_every_option_on(tiny_file):
    options = {
        "do_lower_case": False,
        "strip_accents": True,
        "tokenize_chinese_chars": False,
        "max_input_chars_per_word": 3,
        "cache_size": 2,
        "legacy": True,
    }
    loaded = WordPieceTokenizer.from_file(tiny_file, **options)
    built = WordPieceTokenizer(TINY, **options)
    for text in (*TEXTS, "xxxx xxx Café 中文"):
        assert loaded.tokenize(text) == built.tokenize(text)
    assert loaded.tokenize("xxx xxxx é 中文") == ["x", "##xx", "[UNK]", "e", "[UNK]"]
    assert (
        repr(loaded) == f"WordPieceTokenizer({str(tiny_file)!r}, {len(TINY)} tokens, do_lower_case=False, legacy=True)"
    )
    assert (
        repr(WordPieceTokenizer(TINY))
        == f"WordPieceTokenizer('WordPiece vocabulary', {len(TINY)} tokens, do_lower_case=True)"
    )


def test_from_file_with_other_special_names(tmp_path):
    path = tmp_path / "vocab.txt"
    write_vocab(["<pad>", "<unk>", "<s>", "</s>", "<mask>", "a"], path)
    tok = WordPieceTokenizer.from_file(
        path, unk_token="<unk>", cls_token="<s>", sep_token="</s>", pad_token="<pad>", mask_token="<mask>"
    )
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)


# ------------------------------------------------------------------------------------- decoding


def test_decode_joins_continuations_and_strips_the_ends():
    tok = WordPieceTokenizer([*BERT_SPECIAL_TOKENS, " edge ", "un", "##aff", "##able", "##", "."])
    assert tok.decode([5, 6, 7, 8, 10, 9, 5]) == "edge  unaffable .  edge"
    assert tok.decode(iter([8, 6, 2])) == "##able un [CLS]"
    assert tok.decode([]) == ""


CLEAN_UP = ["do", "n't", "I", "'m", "we", "'re", "they", "'ve", "it", "'s", "'", "q", "'", "a", ",", "b", ".", "c"]
CLEAN_UP += ["?", "d", "!", "e", "##s", "."]


def test_decode_cleans_up_as_transformers_does():
    from transformers import PreTrainedTokenizerBase

    tokens = [*BERT_SPECIAL_TOKENS, *dict.fromkeys(CLEAN_UP)]
    tok = WordPieceTokenizer(tokens)
    ids = [tokens.index(token) for token in CLEAN_UP]
    plain = "do n't I 'm we 're they 've it 's ' q ' a , b . c ? d ! es ."
    assert tok.decode(ids) == plain
    assert tok.decode(ids, clean_up_tokenization_spaces=True) == "don't I'm we're they've it's'q'a, b. c? d! es."
    assert tok.decode(ids, clean_up_tokenization_spaces=True) == PreTrainedTokenizerBase.clean_up_tokenization(
        None, plain
    )


# ------------------------------------------------------------------------------------ wordpiece


@pytest.mark.parametrize(
    "word, pieces",
    [
        ("xxxx", ["x", "##xx", "##x"]),
        ("unaffable", ["un", "##aff", "##able"]),
        ("##xx", ["##xx"]),
        ("##", ["##"]),
        ("abc", ["abc"]),
        ("abcx", ["abc", "##x"]),
        ("ab", None),
        ("", []),
        ("x" * 12, ["x", *["##xx"] * 5, "##x"]),
        ("x" * 13, None),
    ],
)
def test_word_pieces_take_the_longest_token_first(word, pieces):
    vocab = dict.fromkeys(["x", "##x", "##xx", "un", "##aff", "##able", "##", "abc"], 0)
    wordpiece = WordPiece(vocab, max_input_chars_per_word=12)
    assert wordpiece.word_pieces(word) == pieces
    assert wordpiece.tokenize(f" {word}\t{word} ") == (["[UNK]"] if pieces is None else pieces) * 2
    other_unknown = WordPiece(vocab, unk_token="<?>", max_input_chars_per_word=12)
    assert other_unknown.tokenize(word) == (["<?>"] if pieces is None else pieces)


def test_word_pieces_defaults_are_berts():
    wordpiece = WordPiece({"[UNK]": 0, "x": 1, "##x": 2})
    assert (wordpiece.unk_token, wordpiece.max_input_chars_per_word) == ("[UNK]", 100)
    assert wordpiece.word_pieces("x" * 100) == ["x", *["##x"] * 99]
    assert wordpiece.tokenize("x" * 101) == ["[UNK]"]


def test_word_pieces_of_vocabularies_without_continuations():
    assert WordPiece({"ab": 0, "a": 1}).word_pieces("ab") == ["ab"]
    assert WordPiece({"ab": 0, "a": 1}).word_pieces("aba") is None
    assert WordPiece({}).word_pieces("a") is None
    assert WordPiece({"##b": 0, "a": 1, "##bbbbbbbb": 2}).word_pieces("abbbbbbbbb") == ["a", "##bbbbbbbb", "##b"]


@pytest.mark.parametrize("legacy", [False, True])
def test_whole_tokens_at_the_length_limit(legacy):
    tokens = [*BERT_SPECIAL_TOKENS, "abc", "##d", "ab", "##cd"]
    tok = WordPieceTokenizer(tokens, max_input_chars_per_word=3, legacy=legacy)
    assert tok.tokenize("abc abcd ab a") == ["abc", "[UNK]", "ab", "[UNK]"]
    assert WordPieceTokenizer(tokens, max_input_chars_per_word=4, legacy=legacy).tokenize("abcd") == ["abc", "##d"]


# ------------------------------------------------------------------------- bounded character tables


def _distinct_characters(count: int) -> str:
    return "".join(map(chr, range(0x10000, 0x10000 + count)))


@pytest.mark.parametrize("extra, kept", [(0, wordpiece._TABLE_LIMIT), (1, 1)])
def test_character_tables_start_afresh_past_their_limit(extra, kept):
    text = _distinct_characters(wordpiece._TABLE_LIMIT + extra)
    assert wordpiece._TABLE_LIMIT == 1 << 16
    clean = wordpiece._CleanTable(legacy=False, split_cjk=True)
    one_at_a_time = [c.translate(wordpiece._CleanTable(legacy=False, split_cjk=True)) for c in text]
    assert text.translate(clean) == "".join(one_at_a_time)
    assert len(clean) == kept
    normalize = wordpiece._NormalizeTable(strip=False, lower=False, split_punctuation=False)
    assert text.translate(normalize) == text and len(normalize) == kept
    classes = wordpiece._CharacterTable(str.isidentifier)
    assert [classes[c] for c in text] == [c.isidentifier() for c in text] and len(classes) == kept


# ------------------------------------------------------------------------------------- training


def naive_merges(word_counts: dict[str, int], budget: int, known: set[str], min_frequency: int) -> list[str]:
    """The trainer's merge loop as its documentation says it, recounting every pair at each step."""
    words = {word: [word[0], *("##" + c for c in word[1:])] for word in word_counts}
    new_tokens: list[str] = []
    while len(new_tokens) < budget:
        counts: Counter[tuple[str, str]] = Counter()
        for word, pieces in words.items():
            for pair in zip(pieces, pieces[1:]):
                counts[pair] += word_counts[word]
        if not counts:
            break
        left, right = min(counts, key=lambda pair: (-counts[pair], pair))
        if counts[left, right] < min_frequency:
            break
        merged = left + right[2:]
        if merged not in known:
            known.add(merged)
            new_tokens.append(merged)
        for word, pieces in words.items():
            out, j = [], 0
            while j < len(pieces):
                if j + 1 < len(pieces) and (pieces[j], pieces[j + 1]) == (left, right):
                    out.append(merged)
                    j += 2
                else:
                    out.append(pieces[j])
                    j += 1
            words[word] = out
    return new_tokens


def _corpus(seed: int) -> dict[str, int]:
    state, words = seed, {}
    for _ in range(40):
        state = (state * 1103515245 + 12345) % 2**31
        length = 1 + state % 7
        word = "".join("abc"[(state >> (3 + 2 * k)) % 3] for k in range(length))
        words[word] = words.get(word, 0) + 1 + (state >> 20) % 5
    return words


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("min_frequency", [0, 1, 2, 5])
def test_learned_merges_equal_a_naive_recount(seed, min_frequency):
    words = _corpus(seed)
    alphabet = {c for word in words for c in word}
    known = {*alphabet, *("##" + c for c in alphabet)}
    expected = naive_merges(words, 200, set(known), min_frequency)
    assert wordpiece._learn_merges(words, 200, set(known), min_frequency=min_frequency, progress=False) == expected
    short = wordpiece._learn_merges(words, 3, set(known), min_frequency=min_frequency, progress=False)
    assert short == expected[:3]


def test_a_token_two_pairs_spell_is_learned_once():
    known = {"x", "a", "b", "#", "##x", "##a", "##b", "###"}
    learned = wordpiece._learn_merges({"xab": 3, "##ab": 3}, 100, known, min_frequency=1, progress=False)
    assert learned == ["##ab", "##", "xab"]
    assert naive_merges({"xab": 3, "##ab": 3}, 100, {"x", "a", "b", "#", "##x", "##a", "##b", "###"}, 1) == learned
    assert known == {"x", "a", "b", "#", "##x", "##a", "##b", "###", "##ab", "##", "xab"}


def test_merges_stop_below_min_frequency_and_break_ties_by_the_pair():
    texts = ["ab ab ab ac dc dc dc"]
    base = [*BERT_SPECIAL_TOKENS, "a", "c", "b", "d", "##a", "##c", "##b", "##d"]
    assert train_wordpiece_vocab(texts, vocab_size=100, min_frequency=3) == [*base, "ab", "dc"]
    assert train_wordpiece_vocab(texts, vocab_size=100, min_frequency=4) == base
    assert train_wordpiece_vocab(texts, vocab_size=100, min_frequency=1) == [*base, "ab", "dc", "ac"]
    assert train_wordpiece_vocab(texts, vocab_size=len(base) + 1, min_frequency=1) == [*base, "ab"]
    assert train_wordpiece_vocab(texts, vocab_size=len(base)) == base


def test_the_default_min_frequency_is_two():
    base = [*BERT_SPECIAL_TOKENS, "b", "a", "c", "##b", "##a", "##c"]
    assert train_wordpiece_vocab(["ab ab bc"], vocab_size=100) == [*base, "ab"]


TRAINING_TEXTS = ["Café CAFÉ [MASK] x[SEP]x xxxxx 中文 中文", "[mask]", "\u0378"]


@pytest.mark.parametrize(
    "legacy, characters",
    [
        (False, ["a", "c", "e", "f", "x", "中", "文", "[", "]", "k", "m", "s", "\u0378"]),
        (True, ["a", "c", "e", "f", "x", "中", "文", "[", "]", "k", "m", "s"]),
    ],
)
def test_training_counts_words_as_the_tokenizer_splits_them(legacy, characters, capsys):
    vocab = train_wordpiece_vocab(TRAINING_TEXTS, vocab_size=100, max_input_chars_per_word=4, legacy=legacy)
    continuations = ["##" + c for c in characters]
    assert vocab == [*BERT_SPECIAL_TOKENS, *characters, *continuations, "##af", "##afe", "cafe"]
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    "legacy, characters",
    [(False, ["E", "A", "a", "中", "文", "K", "M", "S", "[", "]"]), (True, ["E", "a", "中", "文", "A"])],
)
def test_training_with_options(legacy, characters):
    vocab = train_wordpiece_vocab(
        ["Éa Éa ÉA 中文 中文 [MA\x00SK]"],
        vocab_size=100,
        do_lower_case=False,
        strip_accents=True,
        tokenize_chinese_chars=False,
        special_tokens=["<unk>", "[MASK]"],
        legacy=legacy,
    )
    assert vocab == ["<unk>", "[MASK]", *characters, *("##" + c for c in characters), "Ea", "中文"]
    kept = train_wordpiece_vocab(
        ["Éa Éa"], vocab_size=100, special_tokens=["<unk>"], strip_accents=False, legacy=legacy
    )
    assert kept == ["<unk>", "a", "é", "##a", "##é", "éa"]


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("lower", [False, True])
def test_training_finds_lowercase_specials_in_uppercase_text_only_as_transformers_4_did(legacy, lower):
    vocab = train_wordpiece_vocab(
        ["<UNK> <unk> ΑΣ"],
        vocab_size=100,
        do_lower_case=lower,
        special_tokens=["<unk>"],
        legacy=legacy,
        min_frequency=1,
    )
    if legacy and lower:
        assert vocab == ["<unk>", "α", "σ", "##α", "##σ", "ασ"]
    else:
        word = "unk" if lower else "UNK"
        characters = ["<", ">", *sorted(word), *("ασ" if lower else "ΑΣ")]
        assert vocab == [
            "<unk>",
            *characters,
            *("##" + c for c in characters),
            "##" + word[1:],
            word,
            characters[-2] + characters[-1],
        ]


def test_training_progress_bars(capsys):
    assert train_wordpiece_vocab(["ab ab", "ab"], vocab_size=12, progress=True)[-1] == "ab"
    err = capsys.readouterr().err
    assert re.search(r"counting words: 100%\|[^|]*\| 2/2 \[[^]]*[0-9?]text/s\]", err)
    assert re.search(r"learning WordPiece tokens:  33%\|[^|]*\| 1/3 \[[^]]*[0-9?]token/s\]", err)


@pytest.mark.parametrize(
    "texts, options, expected",
    [
        (
            ["ab"],
            {"vocab_size": 8},
            "vocab_size=8 is too small: the 5 special tokens and the 2 characters of the text "
            "(each also as a ## continuation) need 9",
        ),
        (
            [],
            {"vocab_size": 1, "special_tokens": ["a", "a"]},
            "special_tokens: token 'a' appears twice, on lines 1 and 2 (ids 0 and 1); each token must appear once",
        ),
        ([], {"vocab_size": 1, "special_tokens": []}, "special_tokens: the vocabulary is empty"),
    ],
)
def test_training_refuses_with_a_message(texts, options, expected):
    with pytest.raises(ValueError, match=message(expected)) as caught:
        train_wordpiece_vocab(texts, **options)
    assert type(caught.value) is ValueError


CLEAN_TEXT = "a\x00b\ufffd\x85\u00a0中\U0002b820\u0378\ue000\t\u200b"


@pytest.mark.parametrize(
    "legacy, split_cjk, cleaned",
    [
        (False, False, "ab 中\U0002b820\u0378 "),
        (False, True, "ab  中 \U0002b820\u0378 "),
        (True, False, "ab 中\U0002b820 "),
        (True, True, "ab  中  \U0002b820  "),
    ],
)
def test_a_new_clean_table_cleans_as_its_flavour(legacy, split_cjk, cleaned):
    assert CLEAN_TEXT.translate(wordpiece._CleanTable(legacy=legacy, split_cjk=split_cjk)) == cleaned


@pytest.mark.parametrize(
    "strip, lower, split, normalized",
    [
        (False, False, False, "Ÿ-\u0301\ua7cbÉ"),
        (False, False, True, "Ÿ - \u0301\ua7cbÉ"),
        (False, True, False, "ÿ-\u0301ɤé"),
        (False, True, True, "ÿ - \u0301ɤé"),
        (True, False, False, "Ÿ-\ua7cbÉ"),
        (True, False, True, "Ÿ - \ua7cbÉ"),
        (True, True, False, "ÿ-ɤé"),
        (True, True, True, "ÿ - ɤé"),
    ],
)
def test_a_new_normalize_table_does_what_it_is_asked(strip, lower, split, normalized):
    table = wordpiece._NormalizeTable(strip=strip, lower=lower, split_punctuation=split)
    assert "Ÿ-\u0301\ua7cbÉ".translate(table) == normalized


# -------------------------------------------------------------------------------- pre-tokenizers

BASIC_OPTIONS = [
    {"do_lower_case": False, "never_split": ["[X]"], "tokenize_chinese_chars": False, "strip_accents": True},
    {"do_lower_case": True, "never_split": (), "tokenize_chinese_chars": True, "strip_accents": None},
    {"do_lower_case": True, "never_split": ["[X]", "y"], "tokenize_chinese_chars": True, "strip_accents": False},
]


@pytest.mark.parametrize("options", BASIC_OPTIONS, ids=str)
def test_basic_tokenizer_keeps_its_options_as_transformers_does(options):
    ours = BasicTokenizer(**options)
    theirs = legacy_bert.BasicTokenizer(**options)
    for name in ("do_lower_case", "never_split", "tokenize_chinese_chars", "strip_accents"):
        assert getattr(ours, name) == getattr(theirs, name)
    pre = BertPreTokenizer(**{k: v for k, v in options.items() if k != "never_split"})
    assert (pre.do_lower_case, pre.tokenize_chinese_chars, pre.strip_accents) == (
        options["do_lower_case"],
        options["tokenize_chinese_chars"],
        options["strip_accents"],
    )


ASCII = "".join(f"a{chr(cp)}b " for cp in range(128))
_CJK_EDGES = [0x4E00, 0x9FFF, 0x3400, 0x4DBF, 0x20000, 0x2A6DF, 0x2A700, 0x2B73F, 0x2B740, 0x2B81F, 0x2B820, 0x2B920]
_CJK_EDGES += [0x2CEAF, 0xF900, 0xFAFF, 0x2F800, 0x2FA1F]
CORNERS = [
    *map(chr, range(0x100)),
    *(chr(cp + step) for cp in _CJK_EDGES for step in (-1, 0, 1)),
    *"\u1680\u2000\u2005\u200a\u200b\u200c\u200d\u2028\u2029\u202f\u205f\u3000\ufeff\ufffd\ue000\u0378",
    *"\U000e0001\u0300\u0301\u0345\u2e4a\u055a\uff01\u3001\u0898\u08e2\u166d\u1734\U00011938\ua7cb\u1fef\u0130\u03a3\u212b\uf900",
    "\u0898\u0899",
]
CORNER_TEXT = "".join(f"x{c}y É{c}{c}Ë " for c in CORNERS)


@pytest.mark.parametrize("options", BASIC_OPTIONS, ids=str)
def test_basic_tokenizer_splits_ascii_as_transformers_does(options):
    assert BasicTokenizer(**options).tokenize(ASCII) == legacy_bert.BasicTokenizer(**options).tokenize(ASCII)
    words = ASCII.split()
    theirs = legacy_bert.BasicTokenizer(**options)
    assert [BasicTokenizer(**options).split_word(word) for word in words] == [
        tuple(theirs._run_split_on_punc(word.lower() if options["do_lower_case"] else word)) for word in words
    ]


@pytest.mark.parametrize("options", BASIC_OPTIONS, ids=str)
def test_basic_tokenizer_on_corner_characters_equals_transformers(options):
    assert BasicTokenizer(**options).tokenize(CORNER_TEXT) == legacy_bert.BasicTokenizer(**options).tokenize(
        CORNER_TEXT
    )


@pytest.mark.parametrize("options", BASIC_OPTIONS, ids=str)
def test_pre_tokenizer_on_corner_characters_equals_tokenizers(options):
    options = {name: value for name, value in options.items() if name != "never_split"}
    assert_pre_tokenizer_equals_tokenizers(options, CORNER_TEXT)


def _surrogate_message(snippet: str, index: int) -> str:
    return (
        f"text {snippet!r} has a lone surrogate at index {index} ('\\udcff'): not valid Unicode, which BERT's "
        "tokenizers (transformers 5's BertTokenizer raises TypeError) cannot tokenize; decode the bytes properly first"
    )


@pytest.mark.parametrize("legacy", [False, True])
def test_a_lone_surrogate_is_named_in_the_whole_text(legacy):
    tok = WordPieceTokenizer(TINY, legacy=legacy)
    with pytest.raises(ValueError, match=message(_surrogate_message("[MASK] ok \udcff bytes", 10))):
        tok.encode("[MASK] ok \udcff bytes")


@pytest.mark.parametrize("pre_tokenizer", [BasicTokenizer(), BertPreTokenizer()], ids=["legacy", "rust"])
def test_a_lone_surrogate_stops_the_pre_tokenizers(pre_tokenizer):
    with pytest.raises(ValueError, match=message(_surrogate_message("ab\udcff", 2))):
        pre_tokenizer.tokenize("ab\udcff")
    with pytest.raises(ValueError, match=message(_surrogate_message("ab\udcff", 2))):
        pre_tokenizer.words("ab\udcff")
