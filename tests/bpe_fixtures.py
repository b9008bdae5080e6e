"""A small, real GPT-2-style BPE vocabulary trained inside the test run (nothing is downloaded).

``build_bpe_files(directory)`` writes the three files a RoBERTa model directory holds for its
tokenizer, in the formats the released GPT-2/RoBERTa files use:

* ``encoder.json`` — byte-level token string -> GPT-2 id (256 byte symbols, the merges, and
  ``<|endoftext|>`` last, as in GPT-2's own file);
* ``vocab.bpe``    — ``#version: 0.2`` then one merge ``"<left> <right>"`` per line;
* ``dict.txt``     — fairseq's dictionary: GPT-2 ids as symbols with corpus counts, most frequent
  first, padded with ``madeupwordNNNN 0`` rows to a multiple of 8 as ``fairseq-preprocess`` does.
  Like RoBERTa's released dict.txt it holds (nearly) every GPT-2 id; ``omitted_ids`` are left out
  on purpose, so that fairseq's "GPT-2 id missing from dict.txt -> <unk>" path is exercised.

The vocabulary is trained once per process with HF ``tokenizers.ByteLevelBPETokenizer``
(``add_prefix_space=False``, i.e. GPT-2's pre-tokenisation) on Python standard-library source
files plus :data:`UNICODE_SAMPLES`; later calls only rewrite the files (milliseconds). Reuse it
from any test::

    from tests.bpe_fixtures import build_bpe_files

    def test_something(tmp_path):
        files = build_bpe_files(tmp_path)          # or use the session fixture `bpe_files`
        encoder_json, vocab_bpe, dict_txt = files  # unpacks like a tuple of Paths
"""

from __future__ import annotations

import collections
import functools
import json
import sysconfig
from pathlib import Path
from typing import NamedTuple

# Text a tokenizer must survive: scripts, emoji sequences, combining marks, controls, odd spacing,
# numbers and GPT-2's (case-sensitive) contractions.
UNICODE_SAMPLES: tuple[str, ...] = (
    "Hello world! It's a test, isn't it? We're sure they've said I'm fine; you'll see, he'd go.",
    "IT'S LOUD. WE'RE SURE THEY'VE SAID I'M FINE; YOU'LL SEE, HE'D GO. Don'T 'S 'T 'Re",
    "'s't're've'm'll'd 'S'T'RE'VE'M'LL'D ''s '' 's",
    "Numbers: 0 1 12 123 1234 3.14159 -42 +7 1e10 1,000,000 ½ ¾ ² ³ ٣ ४ 〇 Ⅻ",
    "Emoji: 😀 😃 👍 👍🏻 👍🏽 👍🏿 ❤️ 🇫🇷 🇯🇵 🏳️‍🌈 👨‍👩‍👧‍👦 🧑🏽‍💻 👩‍❤️‍💋‍👨 🤷‍♀️ ✌🏾",
    "CJK: 你好，世界。我爱自然语言处理。日本語のテキストです。한국어 텍스트입니다.",
    "Arabic: مرحبا بالعالم، هذا نص عربي. العربية لغة جميلة.",
    "Hebrew: שלום עולם, זה טקסט בעברית.",
    "Devanagari: नमस्ते दुनिया। यह हिन्दी पाठ है। क्षत्रिय",
    "Thai: สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Greek and Cyrillic: Γειά σου Κόσμε. Привет, мир! Ёжик в тумане.",
    "Combining: e\u0301 a\u0300 o\u0308 n\u0303 Z\u0351\u0352\u0353\u0354 \u0301alone q\u0327\u0328",
    "Precomposed vs decomposed: é e\u0301 Å A\u030a ﬁ ﬀ Ⅸ",
    "Controls: \x00\x01\x02\x07\x08\x1b[31mred\x1b[0m \x7f \x80\x85\x9f end",
    "Tabs\tand\t\ttabs\t \t mixed",
    "Windows\r\nline\r\nendings\r\n\r\nand old Mac\rendings",
    "Spaces:  two   three    four     five      six",
    "   leading spaces and trailing spaces   ",
    "\n\nleading newlines\n\n\ntrailing newlines\n\n",
    "Unicode spaces:\u00a0nbsp\u2009thin\u3000ideographic\u2028line\u2029para\u200bzwsp\ufeffbom",
    "Zero width joiner\u200dand non-joiner\u200c; soft\u00adhyphen; word\u2060joiner",
    "Punctuation: ... !!! ??? --- ___ *** ((())) [[[]]] {{{}}} <<<>>> @#$%^&* «quotes» “curly” ‘single’ — – …",
    "Math: ∀x∈ℝ: x² ≥ 0, ∑ᵢ aᵢ ≠ ∫ f(x) dx ≈ π ≤ ∞",
    "Private use and rare planes: \ue000\uf8ff \U0001d400\U0001d7ff \U00020000\U0002a6d6 \U000e0001",
    "Noncharacters: \ufffe\uffff \U0001fffe \U0010ffff",
    "Replacement char \ufffd and BOM \ufeff inside",
    "Mixed: café naïve façade coöperate résumé Straße İstanbul ǅ ῼ",
    "Code: def f(x):\n    return x**2  # comment\n\tif a != b: pass",
    "URLs: https://example.com/path?query=1&x=y#frag mailto:a@b.c",
    "\"Quotes\" 'apostrophes' `backticks` ''double single''",
)


class BpeFiles(NamedTuple):
    """Paths of a written vocabulary; unpacks as ``encoder_json, vocab_bpe, dict_txt``."""

    encoder_json: Path
    vocab_bpe: Path
    dict_txt: Path

    @property
    def omitted_ids(self) -> frozenset[int]:
        """GPT-2 ids left out of ``dict.txt``: a few corpus pieces and the byte ``"\x03"``."""
        return _trained().omitted_ids


class _Trained(NamedTuple):
    encoder: dict[str, int]
    merges_text: str
    dict_text: str
    omitted_ids: frozenset[int]


# Standard-library modules whose source (code, docstrings, comments) makes an English-heavy corpus.
_CORPUS_MODULES = ("argparse.py", "difflib.py", "inspect.py", "textwrap.py", "calendar.py")


def training_corpus() -> list[str]:
    """The training text: a few hundred KB of stdlib source plus the Unicode samples, repeated."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [(stdlib / name).read_text(encoding="utf-8") for name in _CORPUS_MODULES]
    return texts + list(UNICODE_SAMPLES) * 20


@functools.lru_cache(maxsize=1)
def _trained() -> _Trained:
    from tokenizers import ByteLevelBPETokenizer  # test dependency only

    corpus = training_corpus()
    tokenizer = ByteLevelBPETokenizer(add_prefix_space=False)
    tokenizer.train_from_iterator(corpus, vocab_size=2000, min_frequency=2, show_progress=False)

    model = json.loads(tokenizer.to_str())["model"]
    encoder: dict[str, int] = dict(model["vocab"])
    encoder["<|endoftext|>"] = len(encoder)  # GPT-2 keeps it last; it is never produced by encoding
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in model["merges"]]
    merges_text = "#version: 0.2\n" + "".join(f"{merge}\n" for merge in merges)

    counts = collections.Counter({token_id: 0 for token_id in model["vocab"].values()})
    counts.update(token_id for encoding in tokenizer.encode_batch(corpus) for token_id in encoding.ids)
    # fairseq's Dictionary.finalize order: count descending, ties by symbol string.
    ranked = sorted(counts.items(), key=lambda item: (-item[1], str(item[0])))
    # Leave out a few ids of every frequency (ranks 30, 300, 600, ...) so ordinary text meets
    # <unk>, and the byte "\x03" so that arbitrary text does too.
    omitted_ids = frozenset([*(token_id for token_id, _ in ranked[30::270]), encoder["ă"]])
    rows = [f"{token_id} {count}\n" for token_id, count in ranked if token_id not in omitted_ids]
    specials = 4  # <s> <pad> </s> <unk>
    padding = -(len(rows) + specials) % 8
    rows += [f"madeupword{k:04d} 0\n" for k in range(padding)]
    return _Trained(encoder, merges_text, "".join(rows), omitted_ids)


def build_bpe_files(directory: str | Path) -> BpeFiles:
    """Write ``encoder.json``, ``vocab.bpe`` and ``dict.txt`` into ``directory`` and return their paths.

    The vocabulary is trained on the first call in a process (about a second) and reused after.

    >>> files = build_bpe_files(tmp_path)  # doctest: +SKIP
    >>> encoder_json, vocab_bpe, dict_txt = files  # doctest: +SKIP
    """
    trained = _trained()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = BpeFiles(directory / "encoder.json", directory / "vocab.bpe", directory / "dict.txt")
    files.encoder_json.write_text(json.dumps(trained.encoder, ensure_ascii=False), encoding="utf-8")
    files.vocab_bpe.write_text(trained.merges_text, encoding="utf-8")
    files.dict_txt.write_text(trained.dict_text, encoding="utf-8")
    return files
