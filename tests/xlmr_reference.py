"""Build XLM-R-shaped fairseq checkpoints and record fairseq's own hub outputs on them.

Run as a separate process from the repository root (``python -m tests.xlmr_reference OUT_DIR``)
by the ``xlmr_reference`` fixture (tests/conftest.py), so that the test process never imports
fairseq for the hub: our side is recorded by the same script with ``--impl ours`` in a process
where fairseq, omegaconf and hydra cannot be imported (as ``tests/fairseq_reference.py`` does for
RoBERTa).

Everything is made here with the peers' own code: a SentencePiece model trained (with
SentencePiece's defaults, as XLM-R's ``sentencepiece.bpe.model``) on multilingual text; the
training text encoded by fairseq's ``sentencepiece`` BPE; ``dict.txt`` built from it by
``MaskedLMTask.build_dictionary`` exactly as ``fairseq-preprocess`` builds one (counts, ties by
symbol, padded to a multiple of 8) — or, for the ``xl`` model, XLM-R's own layout (every piece
in SentencePiece's order); models built by ``task.build_model`` with random weights; and the
outputs of ``XLMRModel.from_pretrained(folder, bpe="sentencepiece")``, the hub fairseq serves
XLM-R with.

Models: ``base`` (post-LN, ``roberta_base`` shrunk, an ``args`` Namespace as the 2019 release
files hold, a classification head ``xnli``), ``xl`` (pre-LN without an embedding LayerNorm:
fairseq's ``roberta_prenorm``, XLM-R XL's and XXL's layer order; a ``cfg`` dict) and
``gpt2`` (a RoBERTa with GPT-2 BPE, for the word alignment of ``tests/test_alignment.py``).

Word alignment: fairseq's ``extract_features_aligned_to_words`` needs spaCy, which is not
installed; its two functions, ``align_bpe_to_words`` and ``align_features_to_words``, are called
directly with the words of :func:`roberta_ext.inference.alignment.split_words` (the word list spaCy would
have given is the only input they take from it). Where they raise, or return another number of
rows than the words with ``<s>`` and ``</s>`` (where fairseq's own method fails on its
``assert len(doc) == aligned_feats.size(0)``), the record is ``None``: fairseq's does not work there.
"""

from __future__ import annotations

import argparse
import io
import json
import os
from pathlib import Path

import torch

from tests.bpe_fixtures import UNICODE_SAMPLES, build_bpe_files
from tests.reference_texts import PAIRS, TEXTS

MULTILINGUAL = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "Bonjour le monde ! Le renard brun saute par-dessus le chien paresseux.",
    "Hallo Welt! Der schnelle braune Fuchs springt über den faulen Hund.",
    "Hola mundo. El rápido zorro marrón salta sobre el perro perezoso.",
    "Привет, мир! Быстрая коричневая лиса прыгает через ленивую собаку.",
    "Γειά σου κόσμε! Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "你好，世界！敏捷的棕色狐狸跳过了懒狗。",
    "こんにちは世界。素早い茶色の狐がのろまな犬を飛び越える。",
    "안녕하세요 세계! 빠른 갈색 여우가 게으른 개를 뛰어넘는다.",
    "مرحبا بالعالم! الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "नमस्ते दुनिया! तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "Merhaba dünya! Hızlı kahverengi tilki tembel köpeğin üzerinden atlar.",
    "Xin chào thế giới! Con cáo nâu nhanh nhẹn nhảy qua con chó lười.",
    "Witaj świecie! Szybki brązowy lis przeskakuje nad leniwym psem.",
    "“Curly quotes”, ‘single ones’, «guillemets» and emoji 👍🏽 😀 🇫🇷.",
]
CORPUS = [line for text in [*MULTILINGUAL * 3, *UNICODE_SAMPLES, *TEXTS] for line in text.splitlines() if line.strip()]

SMALL = ["--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4"]
LAYOUTS = {
    "base": dict(arch="roberta_base", layers=2, seed=11, head=("xnli", 3), dictionary="fairseq-preprocess"),
    "xl": dict(arch="roberta_prenorm", layers=2, seed=12, head=None, dictionary="xlmr"),
    "gpt2": dict(arch="roberta_base", layers=2, seed=13, head=None, dictionary="gpt2"),
}
ALIGN_TEXTS = [
    *TEXTS,
    *MULTILINGUAL,
    "Hello world",
    "Hello, world!",
    "world",
    "Hello world! Hello world!",
    "Hello, world! How are you?",
    "A plain sentence with words only",
    "don't stop believing; it's 3.14 o'clock",
    "state-of-the-art (results) [here] {there}",
    "“Curly” ‘quotes’ — and dashes – too…",
    "naïve café, façade, résumé",
    "  spaces   around  ",
    "emoji 👍🏽 👨‍👩‍👧‍👦 🇯🇵 ✔️ end",
    "ﬁnance ① ½ ™",
]
FILL_MASK_INPUTS = [
    "Hello <mask>!",
    "<mask> le monde",
    "Der schnelle braune <mask> springt.",
    "你好，<mask>",
]


def train_sentencepiece(path: Path) -> Path:
    """A SentencePiece model with SentencePiece's defaults (<unk>=0, <s>=1, </s>=2, NFKC), as XLM-R's."""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS),
        model_writer=model,
        vocab_size=700,
        hard_vocab_limit=False,
        character_coverage=0.995,  # a few rare characters stay unknown
        num_threads=1,
        minloglevel=2,
    )
    path.write_bytes(model.getvalue())
    return path


def build_dictionaries(out: Path, spm_model: Path) -> dict[str, Path]:
    """``dict.txt`` as fairseq-preprocess builds it from the encoded corpus, and in XLM-R's layout."""
    import sentencepiece as spm
    from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE, SentencepieceConfig
    from fairseq.tasks.masked_lm import MaskedLMTask

    bpe = SentencepieceBPE(SentencepieceConfig(sentencepiece_model=str(spm_model)))
    encoded = out / "train.spm"
    encoded.write_text("".join(f"{bpe.encode(line)}\n" for line in CORPUS), encoding="utf-8")
    built = MaskedLMTask.build_dictionary([str(encoded)], workers=1, threshold=-1, nwords=-1, padding_factor=8)
    preprocess = out / "dict.preprocess.txt"
    built.save(str(preprocess))
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    xlmr = out / "dict.xlmr.txt"
    xlmr.write_text("".join(f"{sp.id_to_piece(i)} 1\n" for i in range(3, sp.get_piece_size())), encoding="utf-8")
    return {"fairseq-preprocess": preprocess, "xlmr": xlmr}


def build(name: str, spec: dict, out: Path, spm_model: Path, dictionaries: dict[str, Path]) -> Path:
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    model_dir = out / name
    model_dir.mkdir(parents=True, exist_ok=True)
    if spec["dictionary"] == "gpt2":
        bpe_files = build_bpe_files(model_dir)
        bpe_args = ["--bpe", "gpt2"]
    else:
        (model_dir / "dict.txt").write_bytes(dictionaries[spec["dictionary"]].read_bytes())
        (model_dir / "sentencepiece.bpe.model").write_bytes(spm_model.read_bytes())
        bpe_args = ["--bpe", "sentencepiece", "--sentencepiece-model", str(model_dir / "sentencepiece.bpe.model")]
        bpe_files = None
    assert bpe_files is None or bpe_files.dict_txt == model_dir / "dict.txt"
    torch.manual_seed(spec["seed"])
    argv = [str(model_dir), "--task", "masked_lm", "--arch", spec["arch"], "--max-positions", "128"]
    argv += ["--tokens-per-sample", "128", "--encoder-layers", str(spec["layers"]), *SMALL, *bpe_args]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    if spec["head"]:
        model.register_classification_head(spec["head"][0], num_classes=spec["head"][1])
    with torch.no_grad():
        # Spread the LM's output so that fill_mask's ranking is well defined; keep specials out of the top.
        lm_bias = model.encoder.lm_head.bias
        lm_bias.normal_(0.0, 3.0)
        lm_bias[: task.source_dictionary.nspecial] = -30.0
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    history = [
        {
            "criterion_name": "MaskedLmLoss",
            "optimizer_name": "FairseqAdam",
            "lr_scheduler_state": {"best": 2.5},
            "num_updates": 10,
        }
    ]
    extra_state = {"train_iterator": {"epoch": 1, "iterations_in_epoch": 10}, "previous_training_time": 1.5}
    common = {"model": model.state_dict(), "optimizer_history": history, "extra_state": extra_state}
    if name == "base":  # the 2019 release files hold an args Namespace
        state = {"args": args, **common}
    else:
        state = {"args": None, "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), **common}
    torch.save(state, model_dir / "model.pt")
    return model_dir


def words_of(text: str) -> list[str]:
    from roberta_ext.inference.alignment import split_words

    return [word for word, _, _ in split_words(text)]


def fairseq_alignment(hub, text: str) -> dict:
    """fairseq's alignment functions with our word split: the token features, the alignment
    (``None`` where ``align_bpe_to_words`` fails) and the word features (``None`` where fairseq's
    method fails)."""
    from fairseq.models.roberta import alignment_utils

    words = words_of(text)
    tokens = hub.encode(text)
    features = hub.extract_features(tokens).squeeze(0)
    out = {"words": ["<s>", *words, "</s>"], "token_features": features, "alignment": None, "features": None}
    try:
        out["alignment"] = alignment_utils.align_bpe_to_words(hub, tokens, words)
        aligned = alignment_utils.align_features_to_words(hub, features, out["alignment"])
    except Exception:  # AssertionError, "Cannot align", StopIteration: fairseq's failures
        return out
    if aligned.size(0) == len(words) + 2:  # else its method fails on assert len(doc) == aligned_feats.size(0)
        out["features"] = aligned
    return out


def our_alignment(hub, text: str) -> dict:
    from roberta_ext.tokenizers.registry import kind_of

    aligned = hub.extract_features_aligned_to_words(text)
    return {
        "words": aligned.words,
        "alignment": aligned.alignment,
        "features": aligned.features,
        "token_spans": kind_of(hub.tokenizer).spans(hub.tokenizer, text),
        "all_layers": hub.extract_features_aligned_to_words(text, return_all_hiddens=True).features,
    }


def record(model_dir: Path, impl: str) -> dict:
    """Call the hub's methods on the model in ``model_dir`` with ``impl`` ("fairseq" or "ours")."""
    gpt2 = (model_dir / "encoder.json").is_file()
    if impl == "fairseq":
        from fairseq.models.roberta import RobertaModel, XLMRModel

        if gpt2:  # fairseq would download GPT-2's files unless told where they are
            files = {
                "gpt2_encoder_json": str(model_dir / "encoder.json"),
                "gpt2_vocab_bpe": str(model_dir / "vocab.bpe"),
            }
            hub = RobertaModel.from_pretrained(str(model_dir), "model.pt", ".", bpe="gpt2", **files)
        else:
            hub = XLMRModel.from_pretrained(str(model_dir), "model.pt", ".", bpe="sentencepiece")
    else:
        from roberta_ext import from_pretrained

        hub = from_pretrained(str(model_dir), "model.pt", ".", bpe=None if gpt2 else "sentencepiece")
    hub.eval()
    ref: dict = {"encode": [], "decode": [], "pairs": [], "pairs_no_sep": [], "decode_pairs": [], "features": []}
    with torch.no_grad():
        texts = [*TEXTS, *MULTILINGUAL, *ALIGN_TEXTS[len(TEXTS) + len(MULTILINGUAL) :]]
        for text in texts:
            tokens = hub.encode(text)
            ref["encode"].append(tokens.tolist())
            ref["decode"].append(hub.decode(tokens))
        for a, b in [*PAIRS, (MULTILINGUAL[0], MULTILINGUAL[6])]:
            ref["pairs"].append(hub.encode(a, b).tolist())
            ref["pairs_no_sep"].append(hub.encode(a, b, no_separator=True).tolist())
            ref["decode_pairs"].append(hub.decode(hub.encode(a, b)))
        sample = [hub.encode(t) for t in MULTILINGUAL[:6]]
        for tokens in sample:
            ref["features"].append(hub.extract_features(tokens).squeeze(0))
        ref["all_hiddens"] = [h.squeeze(0) for h in hub.extract_features(sample[1], return_all_hiddens=True)]
        padded = torch.nn.utils.rnn.pad_sequence(
            sample, batch_first=True, padding_value=hub.task.source_dictionary.pad()
        )
        ref["padded_tokens"] = padded
        ref["padded_features"] = hub.extract_features(padded)
        ref["heads"] = list(hub.model.classification_heads)
        ref["predict"] = {h: hub.predict(h, padded, return_logits=True) for h in ref["heads"]}
        ref["fill_mask"] = [hub.fill_mask(masked, topk=3) for masked in FILL_MASK_INPUTS]
        align = fairseq_alignment if impl == "fairseq" else our_alignment
        ref["aligned"] = [align(hub, text) for text in ALIGN_TEXTS]
    return ref


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument(
        "--impl",
        choices=["fairseq", "ours"],
        default="fairseq",
        help="fairseq: build the checkpoints and record fairseq's outputs; ours: record our hub's outputs",
    )
    args = parser.parse_args()
    # The files are made by this script; loading them with fairseq's own torch.load call (which
    # torch 2.13 restricts to weights) is safe here and is the reference path. Set here, not on
    # import: tests import this module's texts and must keep torch's safe default.
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    out: Path = args.out_dir
    if args.impl == "fairseq":
        out.mkdir(parents=True, exist_ok=True)
        spm_model = train_sentencepiece(out / "sentencepiece.bpe.model")
        dictionaries = build_dictionaries(out, spm_model)
        models = {name: str(build(name, spec, out, spm_model, dictionaries)) for name, spec in LAYOUTS.items()}
        manifest = {
            "models": models,
            "sentencepiece_model": str(spm_model),
            **{k: str(v) for k, v in dictionaries.items()},
        }
        (out / "manifest.json").write_text(json.dumps(manifest))
    manifest = json.loads((out / "manifest.json").read_text())
    for model_dir in manifest["models"].values():
        torch.save(record(Path(model_dir), args.impl), Path(model_dir) / f"outputs_{args.impl}.pt")


if __name__ == "__main__":
    main()
