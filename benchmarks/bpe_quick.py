"""Rough speed of FairseqGPT2Tokenizer.encode against fairseq's own path, on ~1 MB of text.

fairseq's path is what its RoBERTa hub runs: ``GPT2BPE.encode`` (ids as a string), then
``Dictionary.encode_line(..., add_if_not_exist=False)``. The vocabulary is trained here with HF
``tokenizers`` (30k merges on standard-library source, no download); the measured text is other
standard-library files plus the Unicode samples of the test-suite, split into lines as a corpus
tool would feed them. Run: ``python benchmarks/bpe_quick.py`` (fairseq optional).
"""

from __future__ import annotations

import json
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from roberta_ext.tokenizers import GPT2BPE, FairseqGPT2Tokenizer, ReferenceGPT2BPE
from tests.bpe_fixtures import UNICODE_SAMPLES


def _stdlib_text(names: list[str]) -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return "".join((stdlib / name).read_text(encoding="utf-8") for name in names)


def _train(directory: Path) -> tuple[Path, Path, Path]:
    from tokenizers import ByteLevelBPETokenizer

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    corpus = [path.read_text(encoding="utf-8", errors="replace") for path in sorted(stdlib.glob("*.py"))]
    tokenizer = ByteLevelBPETokenizer(add_prefix_space=False)
    tokenizer.train_from_iterator(corpus, vocab_size=30_000, min_frequency=2, show_progress=False)
    model = json.loads(tokenizer.to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    encoder_json, vocab_bpe, dict_txt = directory / "encoder.json", directory / "vocab.bpe", directory / "dict.txt"
    encoder_json.write_text(json.dumps(model["vocab"], ensure_ascii=False), encoding="utf-8")
    vocab_bpe.write_text("#version: 0.2\n" + "".join(f"{m}\n" for m in merges), encoding="utf-8")
    dict_txt.write_text("".join(f"{i} 1\n" for i in sorted(model["vocab"].values())), encoding="utf-8")
    return encoder_json, vocab_bpe, dict_txt


def _rate(encode: Callable[[str], object], lines: list[str], megabytes: float) -> tuple[float, float]:
    """MB/s of a first (cold cache) pass and of a second (warm) pass."""
    rates = []
    for _ in range(2):
        start = time.perf_counter()
        for line in lines:
            encode(line)
        rates.append(megabytes / (time.perf_counter() - start))
    return rates[0], rates[1]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        encoder_json, vocab_bpe, dict_txt = _train(Path(tmp))
        text = _stdlib_text(
            [
                "typing.py",
                "pydoc.py",
                "tarfile.py",
                "unittest/case.py",
                "_pydecimal.py",
                "turtle.py",
                "logging/__init__.py",
                "subprocess.py",
                "shutil.py",
            ]
        )
        text += "\n".join(UNICODE_SAMPLES) * 100
        lines = text.splitlines(keepends=True)
        megabytes = len(text.encode("utf-8")) / 1e6
        print(f"text: {megabytes:.2f} MB UTF-8, {len(lines)} lines; vocabulary: 30k merges")

        ours = FairseqGPT2Tokenizer.from_files(encoder_json, vocab_bpe, dict_txt)
        cold, warm = _rate(ours.encode, lines, megabytes)
        print(f"FairseqGPT2Tokenizer.encode         cold {cold:6.2f} MB/s   warm {warm:6.2f} MB/s")
        fast = GPT2BPE.from_files(encoder_json, vocab_bpe)
        cold, warm = _rate(fast.encode, lines, megabytes)
        print(f"GPT2BPE.encode (GPT-2 ids)          cold {cold:6.2f} MB/s   warm {warm:6.2f} MB/s")
        reference = ReferenceGPT2BPE.from_files(encoder_json, vocab_bpe)
        cold, _ = _rate(reference.encode, lines[: len(lines) // 10], megabytes / 10)
        print(f"ReferenceGPT2BPE.encode (no cache)  {cold:6.2f} MB/s (on a tenth of the text)")
        try:
            from fairseq.data import Dictionary as FairseqDictionary
            from fairseq.data.encoders.gpt2_bpe import GPT2BPE as FairseqGPT2BPE
            from fairseq.data.encoders.gpt2_bpe import GPT2BPEConfig
        except ImportError:
            print("fairseq not installed: no comparison")
            return
        bpe = FairseqGPT2BPE(GPT2BPEConfig(gpt2_encoder_json=str(encoder_json), gpt2_vocab_bpe=str(vocab_bpe)))
        dictionary = FairseqDictionary.load(str(dict_txt))

        def fairseq_path(line: str) -> object:
            return dictionary.encode_line(bpe.encode(line), append_eos=False, add_if_not_exist=False)

        assert all(ours.encode(line) == fairseq_path(line).tolist() for line in lines[::50])

        cold, warm = _rate(fairseq_path, lines, megabytes)
        print(f"fairseq bpe.encode + encode_line    cold {cold:6.2f} MB/s   warm {warm:6.2f} MB/s")


if __name__ == "__main__":
    main()
