"""XLM-R through the hub: fairseq's ids and outputs, transformers' ids and outputs, both ways.

Peers and golden values:

* fairseq: ``tests/xlmr_reference.py`` (the ``xlmr_reference`` fixture) trains a SentencePiece
  model on multilingual text, builds ``dict.txt`` as fairseq-preprocess does (and in XLM-R's own
  layout), builds XLM-R-shaped models with fairseq (post-LN ``base``, pre-LN ``xl``) and records
  what ``XLMRModel.from_pretrained(folder, bpe="sentencepiece")`` returns; our hub's recording is
  made where fairseq cannot be imported. Ids, text and fill-mask tokens must be equal, tensors
  within 1e-4. On arbitrary Unicode (hypothesis), our ids equal fairseq's own path,
  ``dictionary.encode_line(SentencepieceBPE.encode(text))``, called in this process.
* transformers: a small random ``XLMRobertaForMaskedLM`` and the ``XLMRobertaTokenizer`` that
  transformers builds from the same ``sentencepiece.bpe.model``, saved with ``save_pretrained``;
  and our exports, loaded by transformers' own classes. transformers 5's tokenizer is the
  tokenizers-backed (Rust) one; transformers 4's sentencepiece-based ``XLMRobertaTokenizer`` is
  :class:`SlowXLMR` below (its code, from transformers 4.57.6). Where the two differ, we follow
  the Rust one on whitespace that SentencePiece's normalizer keeps (U+0085 splits words, as
  there) and the sentencepiece library on the normalization of combining marks and variation
  selectors, where the Rust normalizer (``Precompiled``) and SentencePiece's disagree; both are
  pinned below.
"""

from __future__ import annotations

import json
import re
import shutil
import unicodedata
from pathlib import Path

import pytest
import sentencepiece as spm
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import roberta_ext
from roberta_ext.checkpoints import save_roberta_checkpoint
from roberta_ext.families import preset
from roberta_ext.modeling import RobertaModel
from roberta_ext.tokenizers import Dictionary
from roberta_ext.tokenizers.pieces import PieceTokenizer
from roberta_ext.tokenizers.registry import TokenizerFiles, choose_kind, get_kind
from roberta_ext.tokenizers.sentencepiece_tokenizer import (
    WHITE_SPACE,
    SentencePieceFormatError,
    XLMRSentencePiece,
    train_sentencepiece,
)
from tests.conftest import REPO, run_without_fairseq
from tests.peers import require
from tests.reference_texts import PAIRS, TEXTS
from tests.tokenizers.conftest import TEXTS as UNICODE_TEXTS
from tests.xlmr_reference import MULTILINGUAL

ATOL = 1e-4
_SURROGATES = re.compile("[\ud800-\udfff]")
_SPECIALS = ["<s>", "</s>", "<unk>", "<pad>", "<mask>", " <mask>", "<mask> ", "<MASK>", "<s", "s>"]
_CORNERS = [
    "\x85",
    "\u2028",
    "\u3000",
    "\u2581",
    " \u2581 ",
    "\u0301",
    " \u0301",
    "\ufe0f",
    "¯",
    "ﬁ",
    "①",
    "，",
    "\x00",
]
XLMR_TEXTS = (
    st.lists(st.one_of(UNICODE_TEXTS, st.sampled_from(_SPECIALS + _CORNERS + MULTILINGUAL)), max_size=6)
    .map("".join)
    .map(lambda text: _SURROGATES.sub("", text))
)
"""Arbitrary Unicode (lone surrogates are not text: SentencePiece cannot take them), with the
special tokens, whitespace and normalization corner cases and multilingual text mixed in."""
PROPERTY = settings(max_examples=300, deadline=None)


def outputs(reference: dict, name: str) -> tuple[dict, dict]:
    folder = Path(reference["models"][name])
    return tuple(torch.load(folder / f"outputs_{impl}.pt", weights_only=True) for impl in ("fairseq", "ours"))


# ------------------------------------------------------------------------------- the tokenizer


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory) -> Path:
    """A SentencePiece model with SentencePiece's defaults, trained by the library itself."""
    model = tmp_path_factory.mktemp("spm") / "sentencepiece.bpe.model"
    from tests.xlmr_reference import train_sentencepiece as train_reference_model

    return train_reference_model(model)


@pytest.fixture(scope="module")
def fairseq_tokenizers(spm_model, tmp_path_factory) -> dict:
    """``{layout: (fairseq's encode, ours)}`` for dict.txt as fairseq-preprocess builds it and in
    XLM-R's layout; fairseq's is its hub's path: ``encode_line(bpe.encode(text))``."""
    require("fairseq", "fairseq's sentencepiece BPE and Dictionary are the peers")
    from fairseq.data import Dictionary as FairseqDictionary
    from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE, SentencepieceConfig

    from tests.xlmr_reference import build_dictionaries

    folder = tmp_path_factory.mktemp("xlmr_dicts")
    bpe = SentencepieceBPE(SentencepieceConfig(sentencepiece_model=str(spm_model)))
    pairs = {}
    for layout, path in build_dictionaries(folder, spm_model).items():
        theirs = FairseqDictionary.load(str(path))
        theirs.add_symbol("<mask>")
        ours = Dictionary.load(path)
        ours.add_symbol("<mask>")
        tokenizer = get_kind("xlmr_sentencepiece").for_fairseq(
            folder, ours, TokenizerFiles(sentencepiece_model=spm_model)
        )

        def fairseq_encode(text, bpe=bpe, dictionary=theirs):
            return dictionary.encode_line(bpe.encode(text), append_eos=False, add_if_not_exist=False).tolist()

        pairs[layout] = (fairseq_encode, tokenizer, bpe, theirs)
    return pairs


@pytest.mark.parametrize("layout", ["fairseq-preprocess", "xlmr"])
@pytest.mark.parametrize("text", [*TEXTS, *MULTILINGUAL, "a\x85b \x85", "<mask> <s> </s>", "▁ ▁x", "ﬁ ① ½"])
def test_ids_and_text_equal_fairseq_on_samples(fairseq_tokenizers, layout, text):
    fairseq_encode, ours, bpe, dictionary = fairseq_tokenizers[layout]
    ids = ours.encode(text)
    assert ids == fairseq_encode(text)
    assert ours.decode(ids) == bpe.decode(dictionary.string(torch.tensor(ids)))


@PROPERTY
@given(text=XLMR_TEXTS)
def test_ids_equal_fairseq_on_arbitrary_text(fairseq_tokenizers, text):
    for fairseq_encode, ours, bpe, dictionary in fairseq_tokenizers.values():
        ids = ours.encode(text)
        assert ids == fairseq_encode(text)
        assert ours.decode(ids) == bpe.decode(dictionary.string(torch.tensor(ids)))


def test_xlmr_layout_passes_ids_through_and_counted_one_maps_pieces(fairseq_tokenizers):
    assert fairseq_tokenizers["xlmr"][1].is_identity
    counted = fairseq_tokenizers["fairseq-preprocess"][1]
    assert not counted.is_identity
    assert len(counted.dictionary) % 8 == 1  # fairseq-preprocess pads to a multiple of 8; <mask> is added


def test_ids_are_xlmrs_layout(spm_model):
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    tok = XLMRSentencePiece.from_file(spm_model)
    assert [tok.id_to_token(i) for i in range(4)] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert tok.vocab_size == sp.get_piece_size() + 2 and tok.id_to_token(tok.vocab_size - 1) == "<mask>"
    text = "Hello world! 你好，世界"
    assert tok.encode(text) == [i + 1 if i else 3 for i in sp.encode(text)]  # SentencePiece's id + 1, <unk> = 3
    assert tok.tokenize("a\x85b") == ["▁", "a", "b"]  # fairseq: whitespace inside a piece splits it
    split = XLMRSentencePiece.from_file(spm_model, split_specials=True)
    assert split.tokenize("a\x85b") == split.tokenize("a b")  # transformers: U+0085 separates words
    assert split.tokenize("x<mask>y</s>") == [*split.tokenize("x"), "<mask>", *split.tokenize("y"), "</s>"]


def test_spans_are_where_the_pieces_came_from(spm_model):
    tok = XLMRSentencePiece.from_file(spm_model)
    text = "“Curly”  ﬁnance 你好，世界 😀 e\u0301"
    for piece, start, end in tok.tokens_with_spans(text):
        covered = unicodedata.normalize("NFKC", text[start:end]).replace(" ", "▁")
        assert piece.replace("▁", "") in covered.replace("▁", "") or piece == "▁", (piece, text[start:end])
    assert [p for p, _, _ in tok.tokens_with_spans(text)] == tok.tokenize(text)


def test_models_of_other_layouts_and_bad_text_are_refused(tmp_path):
    albert = train_sentencepiece(["ab abc"] * 9, tmp_path / "spiece", vocab_size=20, hard_vocab_limit=False)
    with pytest.raises(SentencePieceFormatError, match=r"spiece.model.*<unk>=0, <s>=1, </s>=2"):
        XLMRSentencePiece.from_file(albert)
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(SentencePieceFormatError, match="junk.model: not a SentencePiece model"):
        XLMRSentencePiece.from_file(tmp_path / "junk.model")
    with pytest.raises(FileNotFoundError, match="missing.model"):
        XLMRSentencePiece.from_file(tmp_path / "missing.model")


def test_bpe_sentencepiece_means_xlmr_or_albert_as_the_files_say(tmp_path, spm_model):
    albert = train_sentencepiece(["ab abc"] * 9, tmp_path / "spiece", vocab_size=20, hard_vocab_limit=False)
    files = TokenizerFiles()
    (tmp_path / "xlmr").mkdir()
    shutil.copy(spm_model, tmp_path / "xlmr" / "sentencepiece.bpe.model")
    assert choose_kind("sentencepiece", tmp_path / "xlmr", files, "gpt2").name == "xlmr_sentencepiece"
    assert choose_kind(None, tmp_path / "xlmr", files, "gpt2").name == "xlmr_sentencepiece"
    assert choose_kind("sentencepiece", tmp_path, files, "gpt2").name == "sentencepiece"  # spiece.model
    given_xlmr = TokenizerFiles(sentencepiece_model=spm_model)
    assert choose_kind("sentencepiece", tmp_path, given_xlmr, "gpt2").name == "xlmr_sentencepiece"
    given_albert = TokenizerFiles(sentencepiece_model=albert)
    assert choose_kind("sentencepiece", tmp_path / "xlmr", given_albert, "gpt2").name == "sentencepiece"


# ------------------------------------------------------------------- the hub against fairseq's


@pytest.mark.parametrize("name", ["base", "xl"])
def test_ids_text_and_pairs_equal_fairseqs_hub(xlmr_reference, name):
    theirs, ours = outputs(xlmr_reference, name)
    for key in ("encode", "decode", "pairs", "pairs_no_sep", "decode_pairs"):
        assert ours[key] == theirs[key], key


@pytest.mark.parametrize("name", ["base", "xl"])
def test_features_and_hidden_states_equal_fairseqs(xlmr_reference, name):
    theirs, ours = outputs(xlmr_reference, name)
    for a, b in zip(ours["features"], theirs["features"], strict=True):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    assert len(ours["all_hiddens"]) == len(theirs["all_hiddens"]) == 3
    for a, b in zip(ours["all_hiddens"], theirs["all_hiddens"], strict=True):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    real = theirs["padded_tokens"].ne(1)
    torch.testing.assert_close(ours["padded_features"][real], theirs["padded_features"][real], atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", ["base", "xl"])
def test_fill_mask_and_heads_equal_fairseqs(xlmr_reference, name):
    theirs, ours = outputs(xlmr_reference, name)
    for mine, reference in zip(ours["fill_mask"], theirs["fill_mask"], strict=True):
        assert [(s, t) for s, _, t in mine] == [(s, t) for s, _, t in reference]
        assert [p for _, p, _ in mine] == pytest.approx([p for _, p, _ in reference], abs=ATOL)
    assert ours["heads"] == theirs["heads"]
    for head in theirs["heads"]:
        torch.testing.assert_close(ours["predict"][head], theirs["predict"][head], atol=ATOL, rtol=0)


def test_fairseqs_checkpoints_load_as_xlmr(xlmr_reference):
    """fairseq's XLM-R files name no family: the tokenizer makes them XLM-R; XL is pre-LN."""
    base = roberta_ext.from_pretrained(xlmr_reference["models"]["base"], bpe="sentencepiece")
    xl = roberta_ext.from_pretrained(xlmr_reference["models"]["xl"])  # the files decide
    assert base.model.cfg.family == xl.model.cfg.family == "xlmr"
    assert not base.model.cfg.encoder_normalize_before and base.model.cfg.layernorm_embedding
    assert xl.model.cfg.encoder_normalize_before and not xl.model.cfg.layernorm_embedding
    assert list(base.model.classification_heads) == ["xnli"]
    gpt2 = roberta_ext.from_pretrained(xlmr_reference["models"]["gpt2"])
    assert gpt2.model.cfg.family == "roberta"


def test_torch_hub_xlmr_entry_works_without_fairseq(xlmr_reference):
    result = run_without_fairseq(
        "import sys, torch\n"
        f"xlmr = torch.hub.load({str(REPO)!r}, 'xlmr', sys.argv[1], source='local')\n"
        "tokens = xlmr.encode('Bonjour le monde')\n"
        "assert xlmr.decode(tokens) == 'Bonjour le monde', xlmr.decode(tokens)\n"
        "assert len(xlmr.fill_mask('Bonjour le <mask>', topk=2)) == 2\n"
        "aligned = xlmr.extract_features_aligned_to_words('“Bonjour” le monde!')\n"
        "assert not any(m.startswith(('fairseq', 'omegaconf', 'hydra')) for m in sys.modules)\n"
        "print(xlmr.model.cfg.family, aligned.words)\n",
        xlmr_reference["models"]["base"],
    )
    assert result.stdout.split("\n")[0] == "xlmr ['<s>', '“', 'Bonjour', '”', 'le', 'monde', '!', '</s>']"


def test_hubconf_has_the_xlmr_entries_and_the_store_their_urls():
    import importlib.util

    from roberta_ext.download import KNOWN_MODELS

    spec = importlib.util.spec_from_file_location("hubconf", REPO / "hubconf.py")
    hubconf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hubconf)
    for name in ("xlmr.base", "xlmr.large", "xlmr.xl", "xlmr.xxl"):
        assert callable(getattr(hubconf, name)) and name in KNOWN_MODELS
    assert "sentencepiece.bpe.model" in hubconf.xlmr.__doc__
    assert KNOWN_MODELS["xlmr.xl"].url == "http://dl.fbaipublicfiles.com/fairseq/models/xlmr/xlmr.xl.tar.gz"


def test_presets_have_xlmrs_shapes():
    base, large = preset("xlmr-base"), preset("xlmr-large")
    xl, xxl = preset("xlmr-xl"), preset("xlmr-xxl")
    assert (base.vocab_size, base.encoder_layers, base.encoder_embed_dim, base.num_position_embeddings) == (
        250002,
        12,
        768,
        514,
    )
    assert (large.encoder_layers, large.encoder_embed_dim, large.encoder_attention_heads) == (24, 1024, 16)
    # facebook/xlm-roberta-xl and -xxl: 250,880 indices, pre-LN without an embedding LayerNorm.
    assert (xl.vocab_size, xl.encoder_layers, xl.encoder_embed_dim, xl.encoder_ffn_embed_dim) == (
        250880,
        36,
        2560,
        10240,
    )
    assert (xxl.encoder_layers, xxl.encoder_embed_dim, xxl.encoder_ffn_embed_dim, xxl.encoder_attention_heads) == (
        48,
        4096,
        16384,
        32,
    )
    assert all(c.encoder_normalize_before and not c.layernorm_embedding for c in (xl, xxl))
    with torch.device("meta"):  # the parameter count of the paper's table, without allocating it
        assert round(sum(p.numel() for p in RobertaModel(base).parameters()) / 1e6) == 278


# ------------------------------------------------------------------------------- transformers


class SlowXLMR:
    """transformers 4.57.6's sentencepiece-based ``XLMRobertaTokenizer``, text -> ids, verbatim where marked."""

    def __init__(self, vocab_file: str) -> None:
        from transformers.tokenization_python import Trie  # unchanged since 4.x

        self.sp_model = spm.SentencePieceProcessor()
        self.sp_model.Load(vocab_file)
        self.fairseq_tokens_to_ids = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}  # verbatim
        self.fairseq_offset = 1  # verbatim
        self.fairseq_tokens_to_ids["<mask>"] = len(self.sp_model) + self.fairseq_offset  # verbatim
        self.unk_token_id = 3
        self.all_special_tokens = ["<s>", "</s>", "<unk>", "<pad>", "<mask>"]  # <mask>: AddedToken(lstrip=True)
        self.tokens_trie = Trie()
        for token in self.all_special_tokens:
            self.tokens_trie.add(token)

    def tokenize(self, text: str) -> list[str]:
        """``PreTrainedTokenizer.tokenize`` (4.57.6) reduced to what XLM-R's tokens use."""
        tokens = self.tokens_trie.split(text)
        for i, token in enumerate(tokens):
            if token == "<mask>" and i > 0 and tokens[i - 1]:  # lstrip=True
                tokens[i - 1] = tokens[i - 1].rstrip()
        out = []
        for token in tokens:
            if token in self.all_special_tokens:
                out.append(token)
            elif token:
                out.extend(self.sp_model.encode(token, out_type=str))  # _tokenize, verbatim
        return out

    def _convert_token_to_id(self, token):  # verbatim
        if token in self.fairseq_tokens_to_ids:
            return self.fairseq_tokens_to_ids[token]
        spm_id = self.sp_model.PieceToId(token)
        # Need to return unknown token if the SP model returned 0
        return spm_id + self.fairseq_offset if spm_id else self.unk_token_id

    def encode(self, text: str) -> list[int]:
        return [self._convert_token_to_id(token) for token in self.tokenize(text)]


def _normalization_differs(text: str) -> bool:
    """Text where transformers' Rust normalizer and SentencePiece's may disagree: combining and
    enclosing marks (and variation selectors), and characters whose NFKC starts with a space."""
    return any(unicodedata.category(c) in ("Mn", "Me") or unicodedata.normalize("NFKC", c)[:1].isspace() for c in text)


SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)


@pytest.fixture(scope="module")
def hf_xlmr(tmp_path_factory, spm_model) -> Path:
    """A random ``XLMRobertaForMaskedLM`` and transformers' tokenizer over the same SentencePiece model."""
    transformers = require("transformers", "transformers' XLM-R classes are the peers")
    folder = tmp_path_factory.mktemp("hf_xlmr")
    shutil.copy(spm_model, folder / "sentencepiece.bpe.model")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), tokenizer_type="xlm-roberta")
    torch.manual_seed(0)
    config = transformers.XLMRobertaConfig(
        vocab_size=len(tokenizer), type_vocab_size=1, pad_token_id=1, max_position_embeddings=130, **SMALL
    )
    transformers.XLMRobertaForMaskedLM(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert (folder / "sentencepiece.bpe.model").is_file() and (folder / "tokenizer.json").is_file()
    return folder


@pytest.fixture(scope="module")
def hf_tokenizer(hf_xlmr):
    transformers = require("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(hf_xlmr))


def test_transformers_folder_gives_its_ids_and_features(hf_xlmr, hf_tokenizer):
    from tests.checkpoints.test_transformers_interop import assert_features_equal

    transformers = require("transformers")
    hub = roberta_ext.from_pretrained(str(hf_xlmr))
    assert hub.model.cfg.family == "xlmr" and hub.tokenizer.is_identity
    for text in [*TEXTS, *MULTILINGUAL, "Hello <mask> world</s>", "a\x85b"]:
        assert hub.encode(text).tolist() == hf_tokenizer(text)["input_ids"], text
    for a, b in [*PAIRS, (MULTILINGUAL[0], MULTILINGUAL[6])]:
        if b:  # transformers takes an empty second text for no pair at all
            assert hub.encode(a, b).tolist() == hf_tokenizer(a, b)["input_ids"]
    model = transformers.XLMRobertaForMaskedLM.from_pretrained(str(hf_xlmr)).eval()
    assert_features_equal(hub, model, [*MULTILINGUAL[:6], *TEXTS[:3]])


@pytest.fixture(scope="module")
def transformers_readings(hf_xlmr) -> tuple[XLMRSentencePiece, SlowXLMR]:
    model = hf_xlmr / "sentencepiece.bpe.model"
    return XLMRSentencePiece.from_file(model, split_specials=True), SlowXLMR(str(model))


def _equally_likely(tok: XLMRSentencePiece, ids: list[int], other: list[int]) -> bool:
    """Whether two segmentations spell the same text with the same unigram score: a tie in the
    Viterbi search, which SentencePiece's C++ and the Rust ``tokenizers`` break differently (for
    ``"***"`` one gives ``▁ ** *``, the other ``▁ * **``)."""

    def score(seq: list[int]) -> float:
        return sum(tok.sp.get_score(tok.sp.piece_to_id(tok.id_to_token(i))) for i in seq)

    spelled = ["".join(tok.id_to_token(i) for i in seq) for seq in (ids, other)]
    return spelled[0] == spelled[1] and abs(score(ids) - score(other)) < 1e-4


@PROPERTY
@given(text=XLMR_TEXTS)
@example(text="***")  # a Viterbi tie: the Rust tokenizer's pieces differ, sentencepiece's are ours
@example(text="a ***** b")
def test_ids_equal_transformers_tokenizers_on_arbitrary_text(transformers_readings, hf_tokenizer, text):
    ours, slow = transformers_readings
    ids = ours.encode(text)
    if not _normalization_differs(text):
        fast = hf_tokenizer(text)["input_ids"][1:-1]
        assert ids == fast or (_equally_likely(ours, ids, fast) and ids == slow.encode(text))
    if not any(c in WHITE_SPACE for c in ours.sp.normalize(text)):  # no whitespace that NFKC keeps
        assert ids == slow.encode(text)


def test_where_the_transformers_tokenizers_differ(transformers_readings, hf_tokenizer):
    ours, slow = transformers_readings
    # U+0085 is whitespace that NFKC keeps: the Rust tokenizer splits words there, and so do we;
    # the sentencepiece one keeps it as a piece (an unknown one).
    assert ours.encode("ø\x85ø") == hf_tokenizer("ø\x85ø")["input_ids"][1:-1] != slow.encode("ø\x85ø")
    # Combining marks and variation selectors after some characters: the normalizers disagree;
    # we give the sentencepiece library's pieces (fairseq's, and transformers 4's).
    differ = [
        t for t in ("º\ufe0f", "a ¯\u0301", "x\u3000\u0301") if ours.encode(t) != hf_tokenizer(t)["input_ids"][1:-1]
    ]
    assert differ
    assert all(ours.encode(t) == slow.encode(t) for t in differ)
    # Segmentations of equal score: the Rust Viterbi search keeps another of the tied paths.
    assert ours.encode("***") == slow.encode("***") != hf_tokenizer("***")["input_ids"][1:-1]
    assert _equally_likely(ours, ours.encode("***"), hf_tokenizer("***")["input_ids"][1:-1])


@pytest.fixture(scope="module")
def fairseq_xlmr_dir(tmp_path_factory, spm_model) -> Path:
    """An XLM-R-layout fairseq folder written by our saver: model.pt, dict.txt (the pieces in
    order), sentencepiece.bpe.model, and a classification head."""
    folder = tmp_path_factory.mktemp("xlmr_fairseq")
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    (folder / "dict.txt").write_text("".join(f"{sp.id_to_piece(i)} 1\n" for i in range(3, sp.get_piece_size())))
    shutil.copy(spm_model, folder / "sentencepiece.bpe.model")
    torch.manual_seed(1)
    model = RobertaModel(preset("xlmr-tiny", vocab_size=sp.get_piece_size() + 2, max_positions=128))
    model.register_classification_head("xnli", num_classes=3)
    save_roberta_checkpoint(model, folder / "model.pt")
    return folder


def test_our_xlmr_exports_to_transformers_and_back(fairseq_xlmr_dir, tmp_path):
    from tests.checkpoints.test_transformers_interop import assert_features_equal

    transformers = require("transformers", "transformers loads the export")
    ours = roberta_ext.from_pretrained(str(fairseq_xlmr_dir))
    assert ours.model.cfg.family == "xlmr"
    exported = ours.save_transformers(tmp_path / "hf", architecture="XLMRobertaForMaskedLM")
    config = json.loads((exported / "config.json").read_text())
    assert config["model_type"] == "xlm-roberta" and config["architectures"] == ["XLMRobertaForMaskedLM"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(exported))
    assert type(tokenizer).__name__ == "XLMRobertaTokenizer"
    for text in [*MULTILINGUAL, *TEXTS[:5]]:
        assert tokenizer(text)["input_ids"] == ours.encode(text).tolist(), text
    assert_features_equal(ours, transformers.XLMRobertaForMaskedLM.from_pretrained(str(exported)).eval(), MULTILINGUAL)
    back = roberta_ext.from_pretrained(str(exported))
    assert back.model.cfg.family == "xlmr"
    mine, theirs = ours.model.state_dict(), back.model.state_dict()
    shared = [k for k in mine if not k.startswith("classification_heads.")]
    assert all(torch.equal(mine[k], theirs[k]) for k in shared)
    assert back.encode(MULTILINGUAL[6]).tolist() == ours.encode(MULTILINGUAL[6]).tolist()


def test_a_counted_dictionary_does_not_export_and_says_why(xlmr_reference, tmp_path):
    hub = roberta_ext.from_pretrained(xlmr_reference["models"]["base"], bpe="sentencepiece")
    with pytest.raises(ValueError, match=r"XLMRobertaTokenizer.*--dict-out"):
        hub.save_transformers(tmp_path / "hf", architecture="XLMRobertaForMaskedLM")
    assert not (tmp_path / "hf").exists()


def test_a_pre_ln_model_does_not_export(xlmr_reference, tmp_path):
    xl = roberta_ext.from_pretrained(xlmr_reference["models"]["xl"])
    with pytest.raises(ValueError, match="pre-LN"):
        xl.save_transformers(tmp_path / "hf")


def test_an_explicit_sentencepiece_model_is_used_and_a_missing_one_named(fairseq_xlmr_dir, tmp_path):
    folder = tmp_path / "moved"
    shutil.copytree(fairseq_xlmr_dir, folder)
    model = folder / "sentencepiece.bpe.model"
    elsewhere = tmp_path / "spm.model"
    model.rename(elsewhere)
    hub = roberta_ext.from_pretrained(str(folder), bpe="sentencepiece", sentencepiece_model=str(elsewhere))
    assert hub.tokenizer.is_identity
    with pytest.raises(FileNotFoundError, match=r"sentencepiece.bpe.model"):
        roberta_ext.from_pretrained(str(folder), bpe="xlmr_sentencepiece")
    assert isinstance(hub.tokenizer, PieceTokenizer)
