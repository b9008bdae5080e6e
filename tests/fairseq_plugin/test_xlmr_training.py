"""XLM-R on the plugin: ``xlmr_ext_{base,large,xl,xxl}``, pretraining on SentencePiece data, and
fine-tuning from fairseq's own XLM-R checkpoints.

* The architectures are fairseq's: base and large are ``roberta_base``/``roberta_large``'s
  layers, XL and XXL ``roberta_prenorm``'s (pre-LN, no embedding LayerNorm), checked through
  fairseq's own argument parsing.
* The pipeline docs/xlmr.md tells users to run: multilingual text -> a SentencePiece model ->
  ``roberta-ext tokenize --tokenizer xlmr_sentencepiece --dict-out dict.txt`` ->
  ``fairseq-preprocess --srcdict dict.txt`` -> ``fairseq-train --arch xlmr_ext_base`` (shrunk to
  2 layers x 32): the MLM loss falls, the checkpoint loads in the hub as XLM-R with the ids of
  the tokenized files, and exports to transformers' ``XLMRobertaForMaskedLM`` with equal features.
* ``--restore-file`` of the checkpoints fairseq built in ``tests/xlmr_reference.py`` (post-LN
  with an ``xnli`` head, and pre-LN) into ``xlmr_ext_base`` / ``xlmr_ext_xl`` with their sizes:
  one update at learning rate 0 keeps every encoder weight, and the ``xnli`` head by name.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from tests.peers import require

require("fairseq", "the tests run fairseq-preprocess and fairseq-train")

import roberta_ext.fairseq_plugin  # noqa: F401  (registers the plugin, even where roberta_ext came first)
from roberta_ext.checkpoints.fairseq import upgrade_state_dict
from roberta_ext.checkpoints.safe_load import load_checkpoint_file
from roberta_ext.cli.corpus import tokenize_main
from roberta_ext.tokenizers import Dictionary
from roberta_ext.tokenizers.sentencepiece_tokenizer import train_xlmr_sentencepiece
from tests.conftest import REPO
from tests.fairseq_plugin.tools import USER_DIR, log_records, preprocess, run
from tests.xlmr_reference import MULTILINGUAL

SIZES = ["--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4"]
LABELS = ("entailment", "neutral", "contradiction")


def parse(*argv: str):
    from fairseq import options

    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, ["data-bin", "--user-dir", str(REPO / "roberta_ext"), *argv])


@pytest.mark.parametrize(
    "ours, fairseqs",
    [
        ("xlmr_ext_base", "roberta_base"),
        ("xlmr_ext_large", "roberta_large"),
        ("xlmr_ext_xl", "roberta_prenorm"),
        ("xlmr_ext_xxl", "roberta_prenorm"),
    ],
)
def test_architectures_have_fairseqs_layer_order(ours, fairseqs):
    mine = parse("--task", "roberta_ext_mlm", "--arch", ours)
    theirs = parse("--task", "masked_lm", "--arch", fairseqs)
    for option in ("encoder_normalize_before", "layernorm_embedding", "activation_fn", "untie_weights_roberta"):
        assert getattr(mine, option) == getattr(theirs, option), option
    assert mine.family == "xlmr"
    if not ours.endswith("xl"):  # fairseq's roberta_prenorm has base sizes; XL and XXL are wider
        for option in ("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_attention_heads"):
            assert getattr(mine, option) == getattr(theirs, option), option


# ----------------------------------------------------------------------------- pretraining


def corpus(count: int, seed: int) -> list[str]:
    """Sentences in several languages and scripts, each a shuffle of one sentence's words."""
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        words = rng.choice(MULTILINGUAL[:12]).split()
        rng.shuffle(words)
        lines.append(" ".join(words[: rng.randint(min(3, len(words)), len(words))]))
    return lines


@pytest.fixture(scope="module")
def xlmr_data(tmp_path_factory) -> dict:
    """Text -> SentencePiece model -> ``roberta-ext tokenize --dict-out`` -> ``fairseq-preprocess --srcdict``."""
    root = tmp_path_factory.mktemp("xlmr_pretrain")
    for split, count, seed in (("train", 600, 1), ("valid", 40, 2)):
        (root / f"{split}.txt").write_text("".join(f"{line}\n" for line in corpus(count, seed)), encoding="utf-8")
    text = (root / "train.txt").read_text(encoding="utf-8").splitlines()
    model = train_xlmr_sentencepiece(text, root / "sentencepiece.bpe", vocab_size=300, hard_vocab_limit=False)
    args = ["--tokenizer", "xlmr_sentencepiece", "--model", str(model), "--no-progress", "--dict-out"]
    args += [str(root / "dict.txt"), "--inputs", str(root / "train.txt"), str(root / "valid.txt")]
    assert tokenize_main([*args, "--outputs", str(root / "train.spm"), str(root / "valid.spm")]) == 0
    data = preprocess(root / "data-bin", root / "train.spm", root / "valid.spm", srcdict=root / "dict.txt")
    return {"root": root, "model": model, "data": data}


def test_the_dictionary_is_xlmrs_layout(xlmr_data):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(xlmr_data["model"]))
    rows = (xlmr_data["root"] / "dict.txt").read_text(encoding="utf-8").splitlines()
    assert [row.rsplit(" ", 1)[0] for row in rows] == [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]
    counts = {row.rsplit(" ", 1)[0]: int(row.rsplit(" ", 1)[1]) for row in rows}
    pieces = (xlmr_data["root"] / "train.spm").read_text(encoding="utf-8").split()
    pieces += (xlmr_data["root"] / "valid.spm").read_text(encoding="utf-8").split()
    assert sum(counts.values()) == len([p for p in pieces if p in counts])
    assert (xlmr_data["data"] / "dict.txt").read_bytes() == (xlmr_data["root"] / "dict.txt").read_bytes()


@pytest.fixture(scope="module")
def pretrained(xlmr_data) -> dict:
    save_dir = xlmr_data["root"] / "checkpoints"
    log = run(
        "fairseq-train", str(xlmr_data["data"]), "--user-dir", USER_DIR,
        "--task", "roberta_ext_mlm", "--criterion", "roberta_ext_mlm", "--arch", "xlmr_ext_base",
        "--encoder-layers", "2", *SIZES, "--tokens-per-sample", "32",
        "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt",
        "--warmup-updates", "10", "--batch-size", "32", "--max-update", "60", "--cpu", "--num-workers", "0",
        "--seed", "1", "--log-format", "json", "--log-interval", "5", "--disable-validation",
        "--save-dir", str(save_dir), "--no-epoch-checkpoints",
    )  # fmt: skip
    return {"save_dir": save_dir, "log": log}


def test_pretraining_loss_falls(pretrained):
    losses = [float(r["loss"]) for r in log_records(pretrained["log"])]
    print("losses", losses)  # shown by pytest -s
    assert len(losses) >= 6, pretrained["log"][-3000:]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.5, losses


def test_the_pretrained_model_serves_as_xlmr_and_exports_to_transformers(xlmr_data, pretrained, tmp_path):
    import roberta_ext
    from tests.checkpoints.test_transformers_interop import assert_features_equal

    transformers = require("transformers", "transformers loads the export")
    hub = roberta_ext.from_pretrained(
        str(pretrained["save_dir"]), "checkpoint_last.pt", str(xlmr_data["data"]),
        bpe="sentencepiece", sentencepiece_model=str(xlmr_data["model"]),
    )  # fmt: skip
    assert hub.model.cfg.family == "xlmr" and hub.tokenizer.is_identity
    dictionary = Dictionary.load(xlmr_data["data"] / "dict.txt")
    lines = (xlmr_data["root"] / "valid.txt").read_text(encoding="utf-8").splitlines()
    pieces = (xlmr_data["root"] / "valid.spm").read_text(encoding="utf-8").splitlines()
    for line, tokenized in zip(lines[:10], pieces):  # the hub's ids are those the model was trained on
        assert hub.encode(line).tolist()[1:-1] == dictionary.encode_line(tokenized, append_eos=False)
    assert len(hub.fill_mask("Hallo <mask>", topk=3)) == 3
    exported = hub.save_transformers(tmp_path / "hf", architecture="XLMRobertaForMaskedLM")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(exported))
    for line in lines[:10]:
        assert tokenizer(line)["input_ids"] == hub.encode(line).tolist()
    assert_features_equal(hub, transformers.XLMRobertaForMaskedLM.from_pretrained(str(exported)).eval(), lines[:6])


# ----------------------------------------------------------------------------- fine-tuning


@pytest.fixture(scope="module")
def cls_data(tmp_path_factory, xlmr_reference) -> dict:
    """Three-class data tokenized with the reference's SentencePiece model, binarized against
    each reference model's dict.txt."""
    root = tmp_path_factory.mktemp("xlmr_finetune")
    for split, count, seed in (("train", 48, 3), ("valid", 16, 4)):
        (root / f"{split}.txt").write_text("".join(f"{line}\n" for line in corpus(count, seed)), encoding="utf-8")
        (root / f"{split}.label").write_text("".join(f"{LABELS[i % 3]}\n" for i in range(count)))
    model = xlmr_reference["sentencepiece_model"]
    args = ["--tokenizer", "xlmr_sentencepiece", "--model", model, "--no-progress"]
    args += ["--inputs", str(root / "train.txt"), str(root / "valid.txt")]
    assert tokenize_main([*args, "--outputs", str(root / "train.input0"), str(root / "valid.input0")]) == 0
    folders = {}
    for name in ("base", "xl"):
        dict_txt = Path(xlmr_reference["models"][name]) / "dict.txt"
        for column, srcdict in (("input0", dict_txt), ("label", None)):
            preprocess(root / name / column, root / f"train.{column}", root / f"valid.{column}", srcdict=srcdict)
        folders[name] = root / name
    return folders


def weights(path: Path) -> dict[str, torch.Tensor]:
    return upgrade_state_dict(dict(load_checkpoint_file(path)["model"]))


@pytest.mark.parametrize("name, arch", [("base", "xlmr_ext_base"), ("xl", "xlmr_ext_xl")])
def test_fairseqs_xlmr_checkpoints_fine_tune_in_the_xlmr_architectures(xlmr_reference, cls_data, tmp_path, name, arch):
    restore = Path(xlmr_reference["models"][name]) / "model.pt"
    head = ["--classification-head-name", "xnli"] if name == "base" else []
    log = run(
        "fairseq-train", str(cls_data[name]), "--user-dir", USER_DIR,
        "--restore-file", str(restore), "--reset-optimizer", "--reset-dataloader", "--reset-meters",
        "--task", "roberta_ext_classification", "--criterion", "roberta_ext_classification",
        "--num-classes", "3", "--init-token", "0", "--separator-token", "2", *head,
        "--arch", arch, "--encoder-layers", "2", *SIZES, "--max-positions", "128",
        "--optimizer", "adam", "--lr", "0", "--lr-scheduler", "fixed",
        "--batch-size", "8", "--max-update", "1", "--cpu", "--num-workers", "0",
        "--save-dir", str(tmp_path), "--no-epoch-checkpoints",
    )  # fmt: skip
    restored, original = weights(tmp_path / "checkpoint_last.pt"), weights(restore)
    encoder = [k for k in original if k.startswith("encoder.sentence_encoder.")]
    assert any(k.endswith(".layer_norm.weight") for k in encoder) == (name == "xl")  # XL's final LayerNorm
    for key in encoder:
        torch.testing.assert_close(restored[key], original[key], rtol=0, atol=0, msg=key)
    if name == "base":  # fairseq's way to continue a head: by its name
        assert "loading head 'xnli' of the checkpoint" in log
        for key in [k for k in original if k.startswith("classification_heads.xnli.")]:
            torch.testing.assert_close(restored[key], original[key], rtol=0, atol=0, msg=key)
    cfg = load_checkpoint_file(tmp_path / "checkpoint_last.pt")["cfg"]["model"]
    assert cfg["family"] == "xlmr" and cfg["encoder_normalize_before"] == (name == "xl")
