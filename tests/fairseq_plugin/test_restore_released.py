"""``--restore-file`` of fairseq's own checkpoints into the plugin's architectures (issue 11, item 3).

The checkpoints are the ``fairseq_reference`` fixture's: built by fairseq itself in every layout
users hold (``tests/fairseq_reference.py``: the fairseq 0.12 ``cfg`` dict, an ``args``
Namespace only, the 2019 release layout with ``decoder.`` keys, a fused ``in_proj`` and an
``mnli`` head, fairseq 0.10's DictConfig, pre-LN). Each is fine-tuned for one update at
learning rate 0, so that the saved checkpoint must hold the file's weights unchanged: the
encoder always, a head of the same name and shape too (as fairseq reuses
``roberta.large.mnli``'s ``mnli`` head), and the log says what was kept, dropped and new.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.peers import require

require("fairseq", "fine-tuning restores fairseq's checkpoints through fairseq-train")

from roberta_ext.checkpoints.fairseq import upgrade_state_dict
from roberta_ext.checkpoints.safe_load import load_checkpoint_file
from tests.fairseq_plugin.tools import USER_DIR, preprocess, run
from tests.fairseq_reference import LAYOUTS

SIZES = "--encoder-embed-dim 32 --encoder-ffn-embed-dim 64 --encoder-attention-heads 4 --max-positions 64".split()
LABELS = ("entailment", "neutral", "contradiction")


@pytest.fixture(scope="module")
def cls_bin(tmp_path_factory, fairseq_reference) -> Path:
    """Three-class data in the reference models' vocabulary (sentences of its symbols)."""
    folder = tmp_path_factory.mktemp("restore")
    dict_txt = Path(fairseq_reference["modern"]) / "dict.txt"
    symbols = [line.split()[0] for line in dict_txt.read_text(encoding="utf-8").splitlines()][:60]
    for split, count in (("train", 48), ("valid", 16)):
        rows = [" ".join(symbols[(i * 7 + j) % len(symbols)] for j in range(3 + i % 9)) for i in range(count)]
        (folder / f"{split}.input0").write_text("".join(f"{row}\n" for row in rows), encoding="utf-8")
        (folder / f"{split}.label").write_text("".join(f"{LABELS[i % 3]}\n" for i in range(count)))
    for column, srcdict in (("input0", dict_txt), ("label", None)):
        preprocess(folder / "cls-bin" / column, folder / f"train.{column}", folder / f"valid.{column}", srcdict=srcdict)
    return folder / "cls-bin"


def fine_tune(cls_bin: Path, restore: Path, save_dir: Path, *extra: str) -> str:
    """One update at learning rate 0 of RTE's recipe (fairseq's flags, our names)."""
    return run(
        "fairseq-train", str(cls_bin), "--user-dir", USER_DIR,
        "--restore-file", str(restore), "--reset-optimizer", "--reset-dataloader", "--reset-meters",
        "--task", "roberta_ext_classification", "--criterion", "roberta_ext_classification",
        "--num-classes", "3", "--init-token", "0", "--separator-token", "2",
        "--arch", "roberta_ext_base", *SIZES,
        "--optimizer", "adam", "--lr", "0", "--lr-scheduler", "fixed",
        "--batch-size", "8", "--max-update", "1", "--cpu", "--num-workers", "0",
        "--save-dir", str(save_dir), "--no-epoch-checkpoints",
        *extra,
    )  # fmt: skip


def weights(path: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's tensors under our key names (any layout)."""
    return upgrade_state_dict(dict(load_checkpoint_file(path)["model"]))


def layers_of(layout: str) -> str:
    extra = LAYOUTS[layout]["extra"]
    return extra[extra.index("--encoder-layers") + 1]


@pytest.mark.parametrize("layout", ["modern", "legacy_args", "release2019", "dictconfig", "preln"])
def test_every_layout_restores_into_the_plugin_arch(fairseq_reference, cls_bin, tmp_path, layout):
    model_dir = Path(fairseq_reference[layout])
    file_head = LAYOUTS[layout]["head"]
    extra = ["--encoder-layers", layers_of(layout)]
    if layout == "preln":
        extra.append("--encoder-normalize-before")
    if file_head:  # the head of the file, by name: fairseq's way to continue roberta.large.mnli's mnli head
        extra += ["--classification-head-name", file_head[0]]
    log = fine_tune(cls_bin, model_dir / "model.pt", tmp_path, *extra)

    restored, original = weights(tmp_path / "checkpoint_last.pt"), weights(model_dir / "model.pt")
    encoder = [k for k in original if k.startswith("encoder.sentence_encoder.")]
    assert len(encoder) > 10
    for key in encoder:
        torch.testing.assert_close(restored[key], original[key], rtol=0, atol=0, msg=key)
    if file_head:
        head_keys = [k for k in original if k.startswith(f"classification_heads.{file_head[0]}.")]
        assert head_keys
        for key in head_keys:
            torch.testing.assert_close(restored[key], original[key], rtol=0, atol=0, msg=key)
        assert f"loading head {file_head[0]!r} of the checkpoint" in log
    else:
        assert "head 'sentence_classification_head' is new" in log


def test_a_head_under_another_name_is_dropped_and_said(fairseq_reference, cls_bin, tmp_path):
    """roberta.large.mnli fine-tuned on another task: its mnli head is dropped, with a warning."""
    log = fine_tune(cls_bin, Path(fairseq_reference["release2019"]) / "model.pt", tmp_path, "--encoder-layers", "3")
    assert "dropping head 'mnli' of the checkpoint" in log
    assert "head 'sentence_classification_head' is new" in log
    assert not any(k.startswith("classification_heads.mnli.") for k in weights(tmp_path / "checkpoint_last.pt"))


def test_a_checkpoint_of_other_sizes_names_the_tensor_and_both_shapes(fairseq_reference, cls_bin, tmp_path):
    restore = Path(fairseq_reference["modern"]) / "model.pt"
    with pytest.raises(AssertionError) as failed:
        fine_tune(cls_bin, restore, tmp_path, "--encoder-layers", "2", "--encoder-ffn-embed-dim", "48")
    message = str(failed.value)
    assert "encoder.sentence_encoder.layers.0.fc1.weight: (64, 32) in the checkpoint, (48, 32) in the model" in message
    assert "2 layers, width 32" in message


def test_a_data_folder_without_label_dictionary_says_what_is_missing(cls_bin, fairseq_reference, tmp_path):
    unlabelled = tmp_path / "no-labels"
    (unlabelled / "input0").mkdir(parents=True)
    (unlabelled / "input0" / "dict.txt").write_bytes((cls_bin / "input0" / "dict.txt").read_bytes())
    with pytest.raises(AssertionError) as failed:
        fine_tune(unlabelled, Path(fairseq_reference["modern"]) / "model.pt", tmp_path, "--encoder-layers", "2")
    assert f"{unlabelled / 'label' / 'dict.txt'} does not exist" in str(failed.value)
    assert "--regression-target" in str(failed.value)
