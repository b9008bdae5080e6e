"""roberta_ext/loading.py: ``from_pretrained`` builds a hub from a fairseq-layout folder as
fairseq's ``from_pretrained`` reads it — the fine-tuned layout (``input0/``, ``label/``), the
dtype asked for — and says what to pass when the folder is not what was asked. The hub's
outputs on every checkpoint layout are compared with fairseq's in tests/test_hub_vs_fairseq.py."""

from __future__ import annotations

import pytest
import torch

import roberta_ext
from tests.test_hub import make_model_dir


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory, bpe_files):
    return make_model_dir(tmp_path_factory.mktemp("loading") / "model", bpe_files, labels=["neg", "pos"])


def test_a_fine_tuned_folder_loads_with_its_labels_and_head(fine_tuned):
    hub = roberta_ext.from_pretrained(str(fine_tuned))  # data_name_or_path "." finds input0/ and label/
    assert hub.labels[:2] == ["neg", "pos"]
    assert sorted(hub.model.classification_heads) == ["sentence_classification_head"]
    assert hub.model.dtype == torch.float32 and hub.model.device == torch.device("cpu")
    assert not hub.model.training  # loaded for use: eval mode, as fairseq's hub


def test_the_dtype_asked_for_is_the_models(fine_tuned):
    hub = roberta_ext.from_pretrained(str(fine_tuned), dtype="bfloat16")
    assert hub.model.dtype == torch.bfloat16
    assert hub.extract_features(hub.encode("Hello")).dtype == torch.bfloat16


def test_what_is_not_there_is_named_with_what_to_pass(fine_tuned, tmp_path):
    with pytest.raises(FileNotFoundError) as missing:
        roberta_ext.from_pretrained(str(fine_tuned), checkpoint_file="checkpoint_best.pt")
    assert str(missing.value) == (
        f"checkpoint file '{fine_tuned / 'checkpoint_best.pt'}' does not exist; '{fine_tuned}' holds model.pt: "
        "pass checkpoint_file='model.pt' (--checkpoint-file model.pt on the roberta-ext commands)"
    )
    with pytest.raises(ValueError, match=r"is not an existing directory or archive, .*known names: roberta.base, "):
        roberta_ext.from_pretrained(str(tmp_path / "absent"))
