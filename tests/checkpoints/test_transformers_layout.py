"""transformers checkpoint layouts (roberta_ext/checkpoints/transformers.py): tiny transformers models of
every family and task class built in the test, read into our model and written back, compared tensor for
tensor with transformers' own state dicts and output for output with its forward passes; every config field
both ways, the optional parts (pooler, LM head, tied decoder, RoBERTa's position offset and one-row segment
table), safetensors, sharded safetensors and ``pytorch_model.bin``, and every error message in full."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
import torch

from tests.peers import require

transformers = require("transformers", "transformers' own models are the reference")

from safetensors import safe_open
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from roberta_ext.checkpoints import CheckpointError
from roberta_ext.checkpoints.transformers import (
    QA_HEAD,
    SEQUENCE_HEAD,
    TOKEN_HEAD,
    LoadedTransformers,
    config_from_transformers,
    default_architecture,
    is_transformers_dir,
    key_map,
    load_transformers,
    read_weights,
    save_transformers,
    transformers_config,
    transformers_state_dict,
)
from roberta_ext.families import preset
from roberta_ext.modeling import EncoderConfig, RobertaModel

pytestmark = pytest.mark.usefixtures("tqdm_lock_of_this_process")

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
CONFIGS = {
    "bert": lambda: transformers.BertConfig(vocab_size=50, max_position_embeddings=40, **SMALL),
    "roberta": lambda: transformers.RobertaConfig(
        vocab_size=50, max_position_embeddings=42, type_vocab_size=1, pad_token_id=1, **SMALL
    ),
    "xlm-roberta": lambda: transformers.XLMRobertaConfig(
        vocab_size=50, max_position_embeddings=42, type_vocab_size=1, pad_token_id=1, **SMALL
    ),
    "albert": lambda: transformers.AlbertConfig(
        vocab_size=50, max_position_embeddings=40, embedding_size=16, **{**SMALL, "num_hidden_layers": 3}
    ),
    "electra": lambda: transformers.ElectraConfig(
        vocab_size=50, max_position_embeddings=40, embedding_size=16, **SMALL
    ),
}
ARCHITECTURES = [
    ("bert", "BertForPreTraining"),
    ("bert", "BertForMaskedLM"),
    ("bert", "BertModel"),
    ("bert", "BertForNextSentencePrediction"),
    ("bert", "BertForSequenceClassification"),
    ("bert", "BertForTokenClassification"),
    ("bert", "BertForQuestionAnswering"),
    ("roberta", "RobertaForMaskedLM"),
    ("roberta", "RobertaForSequenceClassification"),
    ("roberta", "RobertaForTokenClassification"),
    ("roberta", "RobertaForQuestionAnswering"),
    ("xlm-roberta", "XLMRobertaForMaskedLM"),
    ("albert", "AlbertForPreTraining"),
    ("albert", "AlbertForMaskedLM"),
    ("albert", "AlbertModel"),
    ("albert", "AlbertForSequenceClassification"),
    ("electra", "ElectraForPreTraining"),
    ("electra", "ElectraModel"),
    ("electra", "ElectraForSequenceClassification"),
    ("electra", "ElectraForTokenClassification"),
]
BASE_PREFIX = {
    "bert": "bert.",
    "roberta": "roberta.",
    "xlm-roberta": "roberta.",
    "albert": "albert.",
    "electra": "electra.",
}
# No pad (0 for BERT, 1 for RoBERTa) among them: every position is a real token's.
IDS = torch.tensor([[2, 5, 6, 7, 8, 3], [2, 9, 10, 11, 12, 3], [2, 13, 14, 15, 16, 3]])


def hf_model(model_type: str, architecture: str, **changes):
    config = CONFIGS[model_type]()
    for name, value in changes.items():
        setattr(config, name, value)
    torch.manual_seed(0)
    model = getattr(transformers, architecture)(config).eval()
    with torch.no_grad():  # untrained biases and LayerNorms are zeros and ones: make every tensor tell
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model


def save(model, directory: Path, **kwargs) -> Path:
    model.save_pretrained(directory, **kwargs)
    return directory


def their_tensors(model, architecture: str, model_type: str) -> dict[str, torch.Tensor]:
    """transformers' tensors as a ``*For*`` class names them (a bare model's get its base prefix), without
    the buffers and the decoder weight tied to the word embeddings."""
    prefix = BASE_PREFIX[model_type] if not re.search("For[A-Za-z]+$", architecture) else ""
    tied = model.get_input_embeddings().weight
    return {
        prefix + k: v
        for k, v in model.state_dict().items()
        if not k.endswith("position_ids") and not (k.endswith("decoder.weight") and v.data_ptr() == tied.data_ptr())
    }


class SavedModels(dict):
    """``[architecture]``: that transformers model and the folder it saved, made on first use (a mutant's
    tests build only the few they need), with a tqdm lock of this process (see tests/conftest.py)."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self.tmp_path_factory = tmp_path_factory

    def __missing__(self, architecture: str):
        model_type = dict((a, t) for t, a in ARCHITECTURES)[architecture]
        labels = 3 if architecture.endswith(("SequenceClassification", "TokenClassification")) else 2
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tqdm, "_lock", threading.RLock(), raising=False)
            model = hf_model(model_type, architecture, num_labels=labels)
            self[architecture] = (model, save(model, self.tmp_path_factory.mktemp(architecture)))
        return self[architecture]


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory) -> SavedModels:
    return SavedModels(tmp_path_factory)


@pytest.mark.parametrize("model_type,architecture", ARCHITECTURES)
def test_every_tensor_and_output_equals_transformers_both_ways(hf_dirs, model_type, architecture):
    theirs, directory = hf_dirs[architecture]
    loaded = load_transformers(directory)
    model = loaded.model
    assert loaded.architecture == architecture and loaded.path == str(directory) and not model.training
    written = transformers_state_dict(model, architecture)
    expected = their_tensors(theirs, architecture, model_type)
    if model_type in ("roberta", "xlm-roberta") and architecture.endswith("Model"):
        expected = {k: v for k, v in expected.items() if not k.startswith("roberta.pooler.")}
    assert sorted(written) == sorted(expected)
    for key, tensor in expected.items():
        assert torch.equal(written[key], tensor), key
    segments = torch.zeros_like(IDS) if model.cfg.type_vocab_size else None
    with torch.no_grad():
        out = theirs(IDS, attention_mask=torch.ones_like(IDS), output_hidden_states=True)
        ours = model(IDS, features_only=True, return_all_hiddens=True, segment_labels=segments)
    assert len(ours[1]["inner_states"]) == len(out.hidden_states) == model.cfg.encoder_layers + 1
    for mine, hf in zip(ours[1]["inner_states"], out.hidden_states):
        torch.testing.assert_close(mine, hf, atol=1e-5, rtol=1e-4)
    with torch.no_grad():
        if architecture.endswith(("ForMaskedLM", "ForPreTraining")) and model_type != "electra":
            logits = out.logits if architecture.endswith("ForMaskedLM") else out.prediction_logits
            torch.testing.assert_close(model(IDS, segment_labels=segments)[0], logits, atol=1e-5, rtol=1e-4)
        if architecture.endswith("ForPreTraining") and model_type != "electra":
            sentence = out.seq_relationship_logits if model_type == "bert" else out.sop_logits
            head = "next_sentence" if model_type == "bert" else "sentence_order"
            mine = model(IDS, classification_head_name=head, segment_labels=segments)[0]
            torch.testing.assert_close(mine, sentence, atol=1e-5, rtol=1e-4)
        if architecture.endswith("ForNextSentencePrediction"):
            mine = model(IDS, classification_head_name="next_sentence", segment_labels=segments)[0]
            torch.testing.assert_close(mine, out.logits, atol=1e-5, rtol=1e-4)
        if architecture.endswith("ForSequenceClassification"):
            mine = model(IDS, classification_head_name=SEQUENCE_HEAD, segment_labels=segments)[0]
            torch.testing.assert_close(mine, out.logits, atol=1e-5, rtol=1e-4)
        if architecture.endswith("ForTokenClassification"):
            mine = model(IDS, token_head_name=TOKEN_HEAD, segment_labels=segments)[0]
            torch.testing.assert_close(mine, out.logits, atol=1e-5, rtol=1e-4)
        if architecture.endswith("ForQuestionAnswering"):
            mine = model(IDS, token_head_name=QA_HEAD, segment_labels=segments)[0]
            torch.testing.assert_close(mine[..., 0], out.start_logits, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(mine[..., 1], out.end_logits, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "architecture",
    [
        "BertForPreTraining",
        "BertForSequenceClassification",
        "RobertaForMaskedLM",
        "RobertaForTokenClassification",
        "AlbertForPreTraining",
        "ElectraForPreTraining",
        "ElectraForSequenceClassification",
    ],
)
def test_saved_folders_load_in_transformers_with_our_tensors_and_back_exactly(hf_dirs, tmp_path, architecture):
    theirs, directory = hf_dirs[architecture]
    model = load_transformers(directory).model
    assert save_transformers(model, tmp_path / "out", architecture=architecture) == tmp_path / "out"
    again = getattr(transformers, architecture).from_pretrained(str(tmp_path / "out")).eval()
    mine = {k: v for k, v in again.state_dict().items() if not k.endswith("position_ids")}
    expected = {k: v for k, v in theirs.state_dict().items() if not k.endswith("position_ids")}
    assert sorted(mine) == sorted(expected)
    for key, tensor in expected.items():
        assert torch.equal(mine[key], tensor), key
    back = load_transformers(tmp_path / "out").model
    assert back.cfg == model.cfg and back.has_lm_head == model.has_lm_head
    ours, read = model.state_dict(), back.state_dict()
    assert sorted(ours) == sorted(read)
    for key, tensor in ours.items():
        if model.has_lm_head or not key.startswith("encoder.lm_head.") or key == "encoder.lm_head.weight":
            assert torch.equal(read[key], tensor), key


def test_labels_num_labels_and_what_the_files_said(tmp_path):
    labels = ["O", "B-PER", "I-PER", "B-LOC"]
    theirs = hf_model("bert", "BertForTokenClassification", num_labels=4, id2label=dict(enumerate(labels)), label2id={})
    loaded = load_transformers(save(theirs, tmp_path / "ner"))
    assert isinstance(loaded, LoadedTransformers)
    assert loaded.labels == labels and loaded.has_lm_head is False and loaded.unused == []
    assert loaded.config == json.loads((tmp_path / "ner" / "config.json").read_text(encoding="utf-8"))
    assert loaded.model.token_heads[TOKEN_HEAD].num_classes == 4
    classifier = hf_model("roberta", "RobertaForSequenceClassification", id2label={0: "neg", 1: "neu", 2: "pos"})
    loaded = load_transformers(save(classifier, tmp_path / "cls"))
    assert loaded.labels == ["neg", "neu", "pos"] and loaded.model.classification_heads[SEQUENCE_HEAD].num_classes == 3
    for architecture in ("BertForQuestionAnswering", "BertForPreTraining"):
        loaded = load_transformers(save(hf_model("bert", architecture), tmp_path / architecture))
        assert loaded.labels is None
    loaded = load_transformers(tmp_path / "BertForPreTraining")
    assert loaded.has_lm_head is True


@pytest.mark.parametrize(
    "change,num_labels",
    [
        ({"num_labels": 5, "id2label": None, "label2id": None}, 5),
        ({"num_labels": None, "id2label": {"0": "a", "1": "b", "2": "c"}}, 3),
        ({"num_labels": 0, "id2label": {}}, 2),
        ({"num_labels": None, "id2label": None}, 2),
    ],
)
def test_the_head_has_num_labels_else_as_many_as_id2label_else_two(tmp_path, change, num_labels):
    model = RobertaModel(preset("bert-tiny"))
    model.register_token_head(TOKEN_HEAD, num_labels)
    config = transformers_config(model, "BertForTokenClassification")
    config = {k: v for k, v in {**config, **change}.items() if v is not None}
    directory = write_folder(tmp_path / "m", config, transformers_state_dict(model, "BertForTokenClassification"))
    assert load_transformers(directory).model.token_heads[TOKEN_HEAD].num_classes == num_labels


def test_a_config_without_architectures_is_the_bare_model(hf_dirs, tmp_path):
    theirs, directory = hf_dirs["BertModel"]
    (tmp_path / "config.json").write_text(
        json.dumps({**json.loads((directory / "config.json").read_text()), "architectures": []}), encoding="utf-8"
    )
    (tmp_path / "model.safetensors").write_bytes((directory / "model.safetensors").read_bytes())
    loaded = load_transformers(tmp_path)
    assert loaded.architecture == "BertModel" and loaded.has_lm_head is False and loaded.model.pooler is not None
    config = json.loads((directory / "config.json").read_text())
    del config["architectures"]
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert load_transformers(tmp_path).architecture == "BertModel"


def test_a_bare_model_gets_a_fresh_lm_head_tied_to_its_embeddings(hf_dirs):
    model = load_transformers(hf_dirs["BertModel"][1]).model
    head = model.encoder.lm_head
    assert not model.has_lm_head
    assert head.weight is model.encoder.sentence_encoder.embed_tokens.weight
    assert torch.equal(head.bias, torch.zeros(50)) and torch.equal(head.dense.bias, torch.zeros(32))
    assert torch.equal(head.layer_norm.weight, torch.ones(32)) and torch.equal(head.layer_norm.bias, torch.zeros(32))
    assert head.dense.weight.shape == (32, 32) and 0.01 < head.dense.weight.std() < 0.03
    assert head.layer_norm.eps == 1e-12 and head.dense.weight.dtype == torch.float32


def test_albert_fresh_lm_head_maps_its_hidden_size_to_its_embedding_size(hf_dirs):
    head = load_transformers(hf_dirs["AlbertModel"][1]).model.encoder.lm_head
    assert head.dense.weight.shape == (16, 32) and head.layer_norm.weight.shape == (16,)
    assert head.bias.shape == (50,)


def test_half_precision_files_load_as_float32(tmp_path):
    theirs = hf_model("bert", "BertForMaskedLM")
    theirs.half().save_pretrained(tmp_path)
    model = load_transformers(tmp_path).model
    assert {tensor.dtype for tensor in model.state_dict().values()} == {torch.float32}
    written = transformers_state_dict(model, "BertForMaskedLM")
    for key, tensor in their_tensors(theirs, "BertForMaskedLM", "bert").items():
        assert torch.equal(written[key], tensor.float()), key


# ------------------------------------------------------------------------------ optional parts


def write_folder(directory: Path, config: dict, tensors: dict[str, torch.Tensor]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(directory / "model.safetensors"))
    return directory


def folder_of(hf_dirs, architecture: str):
    _, directory = hf_dirs[architecture]
    return json.loads((directory / "config.json").read_text()), load_file(str(directory / "model.safetensors"))


def test_roberta_all_zero_one_row_segment_table_is_left_out_and_written_back(hf_dirs, tmp_path):
    config, tensors = folder_of(hf_dirs, "RobertaForMaskedLM")
    tensors["roberta.embeddings.token_type_embeddings.weight"] = torch.zeros(1, 32)
    model = load_transformers(write_folder(tmp_path / "zero", config, tensors)).model
    assert model.cfg.type_vocab_size == 0 and "encoder.sentence_encoder.segment_embeddings.weight" not in (
        model.state_dict()
    )
    written = transformers_state_dict(model, "RobertaForMaskedLM")
    assert sorted(written) == sorted({*tensors, "lm_head.decoder.bias"})
    assert torch.equal(written["roberta.embeddings.token_type_embeddings.weight"], torch.zeros(1, 32))
    assert transformers_config(model, "RobertaForMaskedLM")["type_vocab_size"] == 1


@pytest.mark.parametrize(
    "architecture,table",
    [
        ("RobertaForMaskedLM", torch.full((1, 32), 0.5)),
        ("RobertaForMaskedLM", torch.zeros(2, 32)),
        ("BertForMaskedLM", torch.zeros(1, 32)),
    ],
)
def test_other_segment_tables_are_kept(hf_dirs, tmp_path, architecture, table):
    config, tensors = folder_of(hf_dirs, architecture)
    key = ("roberta." if architecture.startswith("Roberta") else "bert.") + "embeddings.token_type_embeddings.weight"
    tensors[key] = table
    config["type_vocab_size"] = len(table)
    model = load_transformers(write_folder(tmp_path / "m", config, tensors)).model
    assert model.cfg.type_vocab_size == len(table)
    assert torch.equal(transformers_state_dict(model, architecture)[key], table)


def test_roberta_pooler_is_dropped_and_bert_pooler_kept(hf_dirs, tmp_path):
    config, tensors = folder_of(hf_dirs, "RobertaForMaskedLM")
    tensors.update({"roberta.pooler.dense.weight": torch.ones(32, 32), "roberta.pooler.dense.bias": torch.ones(32)})
    model = load_transformers(write_folder(tmp_path / "roberta", config, tensors)).model
    assert model.pooler is None and model.cfg.pooler is False
    assert load_transformers(hf_dirs["BertModel"][1]).model.cfg.pooler is True
    bare = hf_model("bert", "BertModel")
    bare = transformers.BertModel(bare.config, add_pooling_layer=False)
    model = load_transformers(save(bare, tmp_path / "no_pooler")).model
    assert model.pooler is None and model.cfg.pooler is False


def test_bare_files_and_prefixed_files_read_alike(hf_dirs, tmp_path):
    config, tensors = folder_of(hf_dirs, "BertForMaskedLM")
    bare = {k.removeprefix("bert."): v for k, v in tensors.items() if k.startswith("bert.")}
    model = load_transformers(write_folder(tmp_path / "bare", {**config, "architectures": ["BertModel"]}, bare)).model
    assert model.pooler is None and not model.has_lm_head
    reference = load_transformers(hf_dirs["BertForMaskedLM"][1]).model.state_dict()
    for key, tensor in model.state_dict().items():
        if not key.startswith("encoder.lm_head."):
            assert torch.equal(tensor, reference[key]), key


@pytest.mark.parametrize(
    "name",
    [
        "bert.embeddings.position_ids",
        "bert.embeddings.token_type_ids",
        "embeddings.position_ids",
        "cls.predictions.decoder.bias",
        "cls.predictions.decoder.weight",
    ],
)
def test_buffers_and_tied_duplicates_in_the_file_are_accepted(hf_dirs, tmp_path, name):
    config, tensors = folder_of(hf_dirs, "BertForMaskedLM")
    expected = sorted({*tensors, "cls.predictions.decoder.bias"})
    copies = {
        "cls.predictions.decoder.bias": tensors["cls.predictions.bias"].clone(),
        "cls.predictions.decoder.weight": tensors["bert.embeddings.word_embeddings.weight"].clone(),
    }
    tensors[name] = copies.get(name, torch.arange(40)[None])
    model = load_transformers(write_folder(tmp_path / "m", config, tensors)).model
    assert sorted(transformers_state_dict(model, "BertForMaskedLM")) == expected


@pytest.mark.parametrize(
    "name",
    ["bert.embeddings.position_ids_old", "bert.xembeddings.position_ids", "bert.embeddings.token_type_idsx"],
)
def test_other_names_like_the_buffers_are_unused_tensors(hf_dirs, tmp_path, name):
    config, tensors = folder_of(hf_dirs, "BertForMaskedLM")
    tensors[name] = torch.arange(4)
    directory = write_folder(tmp_path / "m", config, tensors)
    message = (
        f"{str(directory) + ' (BertForMaskedLM)'!r} does not match a bert model: parameters not in the file "
        f"[], tensors of the file nothing takes ['{name}']"
    )
    with pytest.raises(CheckpointError, match=re.escape(message) + "$"):
        load_transformers(directory)


@pytest.mark.parametrize(
    "name,original",
    [
        ("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"),
        ("cls.predictions.decoder.bias", "cls.predictions.bias"),
    ],
)
def test_an_untied_decoder_is_refused(hf_dirs, tmp_path, name, original):
    config, tensors = folder_of(hf_dirs, "BertForMaskedLM")
    tensors[name] = tensors[original] + 1
    directory = write_folder(tmp_path / "m", config, tensors)
    message = f"{str(directory)!r}: {name} differs from {original}; untied output projections are not supported"
    with pytest.raises(CheckpointError, match=re.escape(message) + "$"):
        load_transformers(directory)


# ------------------------------------------------------------------------------ weights files


def test_safetensors_sharded_and_pytorch_model_bin_read_the_same(hf_dirs, tmp_path):
    theirs, directory = hf_dirs["BertForPreTraining"]
    single = read_weights(directory)
    theirs.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert not (tmp_path / "sharded" / "model.safetensors").exists()
    assert len(list((tmp_path / "sharded").glob("model-*-of-*.safetensors"))) > 2
    sharded = read_weights(tmp_path / "sharded")
    (tmp_path / "bin").mkdir()
    torch.save(single, tmp_path / "bin" / "pytorch_model.bin")
    from_bin = read_weights(tmp_path / "bin")
    for tensors in (sharded, from_bin):
        assert sorted(tensors) == sorted(single)
        assert all(torch.equal(tensors[k], single[k]) for k in single)
    assert sorted(load_transformers(tmp_path / "sharded").model.state_dict()) == sorted(
        load_transformers(directory).model.state_dict()
    )


def test_model_safetensors_comes_before_an_index_and_an_index_before_pytorch_model_bin(hf_dirs, tmp_path):
    _, directory = hf_dirs["BertForMaskedLM"]
    single = read_weights(directory)
    (tmp_path / "model.safetensors").write_bytes((directory / "model.safetensors").read_bytes())
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "gone.safetensors"}}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not a pickle")
    assert sorted(read_weights(tmp_path)) == sorted(single)
    (tmp_path / "model.safetensors").unlink()
    message = f"weights file {str(tmp_path / 'gone.safetensors')!r} does not exist"
    with pytest.raises(FileNotFoundError, match=re.escape(message) + "$"):
        read_weights(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))
    assert read_weights(tmp_path) == {}


def test_pytorch_model_bin_must_hold_a_dict_of_tensors(tmp_path):
    for value in ([torch.zeros(1)], {"a": torch.zeros(1), "b": 1}):
        torch.save(value, tmp_path / "pytorch_model.bin")
        message = f"{str(tmp_path / 'pytorch_model.bin')!r} is not a state dict of tensors"
        with pytest.raises(CheckpointError, match=re.escape(message) + "$"):
            read_weights(tmp_path)
    torch.save({"a": torch.ones(2)}, tmp_path / "pytorch_model.bin")
    weights = read_weights(tmp_path)
    assert type(weights) is dict and list(weights) == ["a"] and torch.equal(weights["a"], torch.ones(2))


def test_a_folder_without_weights_and_a_broken_safetensors_file_say_so(tmp_path):
    message = f"{str(tmp_path)!r} has no model.safetensors, model.safetensors.index.json or pytorch_model.bin"
    with pytest.raises(FileNotFoundError, match=re.escape(message) + "$"):
        read_weights(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    from safetensors import SafetensorError

    with pytest.raises(SafetensorError) as raised:
        load_file(str(tmp_path / "model.safetensors"))
    message = f"{str(tmp_path / 'model.safetensors')!r} is not a readable safetensors file ({raised.value})"
    with pytest.raises(CheckpointError, match=re.escape(message) + "$"):
        read_weights(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "model.safetensors").mkdir()
    with pytest.raises(FileNotFoundError):
        read_weights(tmp_path)


@pytest.mark.parametrize(
    "files,expected",
    [
        (["config.json", "model.safetensors"], True),
        (["config.json", "model.safetensors.index.json"], True),
        (["config.json", "pytorch_model.bin"], True),
        (["config.json", "tf_model.h5"], False),
        (["model.safetensors"], False),
        (["config.json/", "model.safetensors"], False),
        (["config.json", "model.safetensors/"], False),
    ],
)
def test_is_transformers_dir_wants_config_json_and_a_weights_file(tmp_path, files, expected):
    for name in files:
        if name.endswith("/"):
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_text("{}")
    assert is_transformers_dir(tmp_path) is expected
    assert is_transformers_dir(str(tmp_path)) is expected


def test_config_json_missing_or_not_json(hf_dirs, tmp_path):
    with pytest.raises(FileNotFoundError) as raised:
        load_transformers(tmp_path)
    assert raised.value.filename == str(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError) as reference:
        json.loads("{not json")
    message = f"{str(tmp_path / 'config.json')!r} is not valid JSON ({reference.value})"
    with pytest.raises(CheckpointError, match=re.escape(message) + "$"):
        load_transformers(tmp_path)
    (tmp_path / "config.json").write_bytes(b"\xff{}")
    with pytest.raises(CheckpointError, match=re.escape(f"{str(tmp_path / 'config.json')!r} is not valid JSON (")):
        load_transformers(tmp_path)
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").mkdir()
    with pytest.raises(IsADirectoryError) as reference:
        (tmp_path / "config.json").read_text()
    message = f"{str(tmp_path / 'config.json')!r} is not valid JSON ({reference.value})"
    with pytest.raises(CheckpointError, match=re.escape(message) + "$"):
        load_transformers(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text("[1,")
    with pytest.raises(CheckpointError, match=re.escape(f"{str(tmp_path / 'model.safetensors.index.json')!r}")):
        read_weights(tmp_path)


# ------------------------------------------------------------------------------ configs


BERT_MINIMAL = {
    "model_type": "bert",
    "vocab_size": 100,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
}


def test_config_defaults_are_transformers_defaults():
    assert config_from_transformers(BERT_MINIMAL) == EncoderConfig(
        family="bert",
        vocab_size=100,
        padding_idx=0,
        encoder_layers=2,
        encoder_embed_dim=32,
        encoder_ffn_embed_dim=64,
        encoder_attention_heads=4,
        activation_fn="gelu",
        layer_norm_eps=1e-12,
        type_vocab_size=2,
        dropout=0.1,
        attention_dropout=0.1,
        pooler_dropout=0.1,
        position_style="absolute",
        max_positions=512,
    )
    roberta = config_from_transformers({**BERT_MINIMAL, "model_type": "roberta"})
    assert (roberta.family, roberta.padding_idx, roberta.max_positions, roberta.position_style) == (
        "roberta",
        1,
        510,
        "fairseq",
    )
    assert roberta.num_position_embeddings == 512


def test_every_config_field_is_read():
    config = {
        **BERT_MINIMAL,
        "pad_token_id": 3,
        "hidden_act": "relu",
        "layer_norm_eps": 1e-7,
        "type_vocab_size": 4,
        "hidden_dropout_prob": 0.25,
        "attention_probs_dropout_prob": 0.125,
        "classifier_dropout": 0.375,
        "classifier_dropout_prob": 0.5,
        "position_embedding_type": "absolute",
        "max_position_embeddings": 128,
    }
    assert config_from_transformers(config) == EncoderConfig(
        family="bert",
        vocab_size=100,
        padding_idx=3,
        encoder_layers=2,
        encoder_embed_dim=32,
        encoder_ffn_embed_dim=64,
        encoder_attention_heads=4,
        activation_fn="relu",
        layer_norm_eps=1e-7,
        type_vocab_size=4,
        dropout=0.25,
        attention_dropout=0.125,
        pooler_dropout=0.375,
        position_style="absolute",
        max_positions=128,
    )
    assert config_from_transformers({**config, "classifier_dropout": None}).pooler_dropout == 0.5
    assert (
        config_from_transformers({**config, "classifier_dropout": None, "classifier_dropout_prob": None}).pooler_dropout
        == 0.25
    )
    # 0.0 is a setting, not a missing one: transformers' heads then drop nothing.
    assert config_from_transformers({**config, "classifier_dropout": 0.0}).pooler_dropout == 0.0
    assert (
        config_from_transformers({**config, "classifier_dropout": None, "classifier_dropout_prob": 0.0}).pooler_dropout
        == 0.0
    )


@pytest.mark.parametrize(
    "name,ours",
    [
        ("gelu", "gelu"),
        ("gelu_new", "gelu_accurate"),
        ("gelu_pytorch_tanh", "gelu_accurate"),
        ("gelu_fast", "gelu_accurate"),
        ("relu", "relu"),
        ("tanh", "tanh"),
        ("linear", "linear"),
    ],
)
def test_activations_map_to_ours_and_back(name, ours):
    cfg = config_from_transformers({**BERT_MINIMAL, "hidden_act": name})
    assert cfg.activation_fn == ours
    written = transformers_config(RobertaModel(cfg), "BertForMaskedLM")["hidden_act"]
    assert written == {"gelu_accurate": "gelu_new"}.get(ours, ours)


def test_family_configs_read_their_own_fields():
    albert = config_from_transformers({**BERT_MINIMAL, "model_type": "albert", "embedding_size": 16})
    assert (albert.embedding_size, albert.share_layers) == (16, "all")
    electra = config_from_transformers({**BERT_MINIMAL, "model_type": "electra", "embedding_size": 32})
    assert (electra.embedding_size, electra.pooler_activation_fn) == (None, "gelu")


@pytest.mark.parametrize(
    "change,message",
    [
        (
            {"model_type": "gpt2"},
            "'cfg.json': model_type 'gpt2' is not supported; known: "
            "['albert', 'bert', 'electra', 'modernbert', 'roberta', 'xlm-roberta']",
        ),
        (
            {"model_type": None},
            "'cfg.json': model_type None is not supported; known: "
            "['albert', 'bert', 'electra', 'modernbert', 'roberta', 'xlm-roberta']",
        ),
        (
            {"position_embedding_type": "relative_key"},
            "'cfg.json': position_embedding_type 'relative_key' is not supported (only 'absolute')",
        ),
        (
            {"hidden_act": "swish"},
            "'cfg.json': hidden_act 'swish' is not supported; known: "
            "['gelu', 'gelu_fast', 'gelu_new', 'gelu_pytorch_tanh', 'linear', 'relu', 'tanh']",
        ),
        (
            {"model_type": "albert", "num_hidden_groups": 2},
            "'cfg.json': ALBERT with num_hidden_groups/inner_group_num other than 1 is not supported",
        ),
    ],
)
def test_unsupported_configs_name_the_file_and_the_field(change, message):
    config = {k: v for k, v in {**BERT_MINIMAL, **change}.items() if v is not None}
    with pytest.raises(CheckpointError, match=re.escape(message) + "$"):
        config_from_transformers(config, path="cfg.json")


def test_unsupported_configs_name_config_json_by_default():
    message = "'config.json': position_embedding_type 'rotary' is not supported (only 'absolute')"
    with pytest.raises(CheckpointError, match=re.escape(message) + "$"):
        config_from_transformers({**BERT_MINIMAL, "position_embedding_type": "rotary"})


def test_families_without_transformers_layout_are_refused():
    cfg = EncoderConfig(family="spanbert", encoder_layers=1, encoder_embed_dim=32, encoder_attention_heads=4)
    message = (
        "family 'spanbert' has no transformers counterpart; "
        "supported: ['albert', 'bert', 'electra', 'modernbert', 'roberta', 'xlmr']"
    )
    with pytest.raises(ValueError, match=re.escape(message) + "$"):
        key_map(cfg, "BertForMaskedLM")


def expected_config(**changes) -> dict:
    return {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "vocab_size": 64,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "hidden_act": "gelu",
        "max_position_embeddings": 64,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
        **changes,
    }


def test_written_config_json_is_exact(tmp_path):
    model = RobertaModel(preset("bert-tiny")).eval()
    model.register_classification_head(SEQUENCE_HEAD, 3)
    written = save_transformers(model, tmp_path / "a", labels=["x", "y", "z"])
    config = expected_config(num_labels=3, id2label={"0": "x", "1": "y", "2": "z"}, label2id={"x": 0, "y": 1, "z": 2})
    assert (written / "config.json").read_text(encoding="utf-8") == json.dumps(config, indent=2, sort_keys=True) + "\n"
    with safe_open(str(written / "model.safetensors"), "pt") as file:
        assert file.metadata() == {"format": "pt"}
    assert sorted(p.name for p in written.iterdir()) == ["config.json", "model.safetensors"]
    assert transformers_config(model, "BertForSequenceClassification")["id2label"] == {
        "0": "LABEL_0",
        "1": "LABEL_1",
        "2": "LABEL_2",
    }
    model.register_token_head(TOKEN_HEAD, 2)
    assert transformers_config(model, "BertForTokenClassification", ["a", "b"]) == expected_config(
        architectures=["BertForTokenClassification"],
        num_labels=2,
        id2label={"0": "a", "1": "b"},
        label2id={"a": 0, "b": 1},
    )


@pytest.mark.parametrize(
    "name,architecture,changes",
    [
        ("bert-tiny", "BertForMaskedLM", {}),
        ("bert-tiny", "BertForQuestionAnswering", {}),
        (
            "tiny",
            "RobertaForMaskedLM",
            {
                "model_type": "roberta",
                "max_position_embeddings": 66,
                "type_vocab_size": 1,
                "pad_token_id": 1,
                "layer_norm_eps": 1e-5,
                "bos_token_id": 0,
                "eos_token_id": 2,
            },
        ),
        (
            "albert-tiny",
            "AlbertForMaskedLM",
            {
                "model_type": "albert",
                "embedding_size": 16,
                "num_hidden_groups": 1,
                "inner_group_num": 1,
                "classifier_dropout_prob": 0.0,
                "hidden_act": "gelu_new",
                "hidden_dropout_prob": 0.0,
                "attention_probs_dropout_prob": 0.0,
            },
        ),
        ("electra-tiny", "ElectraForPreTraining", {"model_type": "electra", "embedding_size": 16}),
    ],
)
def test_family_config_entries(name, architecture, changes):
    model = RobertaModel(preset(name))
    expected = expected_config(architectures=[architecture], **changes)
    written = transformers_config(model, architecture)
    assert {k: v for k, v in written.items() if k != "layer_norm_eps"} == {
        k: v for k, v in expected.items() if k != "layer_norm_eps"
    }
    assert written["layer_norm_eps"] == model.cfg.layer_norm_eps


def test_save_transformers_picks_the_architecture_and_runs_extra_files(tmp_path):
    model = RobertaModel(preset("bert-tiny")).eval()
    model.register_classification_head("next_sentence", 2)
    seen = []

    def extra(folder: Path) -> None:
        seen.append(folder.exists() and folder != tmp_path / "out")
        (folder / "vocab.txt").write_text("[PAD]\n")

    save_transformers(model, tmp_path / "out", extra_files=extra)
    assert seen == [True]
    assert (tmp_path / "out" / "vocab.txt").read_text() == "[PAD]\n"
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    assert sorted(load_file(str(tmp_path / "out" / "model.safetensors"))) == sorted(
        transformers_state_dict(model, "BertForPreTraining")
    )


def electra_discriminator(hf_dirs) -> RobertaModel:
    return load_transformers(hf_dirs["ElectraForPreTraining"][1]).model


@pytest.mark.parametrize(
    "build,expected",
    [
        (lambda m: None, "BertForMaskedLM"),
        (lambda m: m.register_classification_head("next_sentence", 2), "BertForPreTraining"),
        (lambda m: m.register_classification_head(SEQUENCE_HEAD, 3), "BertForSequenceClassification"),
        (
            lambda m: (
                m.register_classification_head(SEQUENCE_HEAD, 3),
                m.register_classification_head("next_sentence", 2),
            ),
            "BertForSequenceClassification",
        ),
        (lambda m: m.register_token_head(TOKEN_HEAD, 3), "BertForTokenClassification"),
        (lambda m: m.register_token_head(QA_HEAD, 2), "BertForQuestionAnswering"),
        (
            lambda m: (m.register_token_head(QA_HEAD, 2), m.register_token_head(TOKEN_HEAD, 2)),
            "BertForTokenClassification",
        ),
        (lambda m: m.register_classification_head("other", 2), "BertForMaskedLM"),
    ],
)
def test_default_architecture_follows_the_heads(build, expected):
    model = RobertaModel(preset("bert-tiny"))
    build(model)
    assert default_architecture(model) == expected


def test_default_architecture_of_other_families(hf_dirs):
    no_pooler = RobertaModel(preset("bert-tiny", pooler=False))
    no_pooler.register_classification_head("next_sentence", 2)
    assert default_architecture(no_pooler) == "BertForMaskedLM"
    assert default_architecture(RobertaModel(preset("tiny"))) == "RobertaForMaskedLM"
    albert = RobertaModel(preset("albert-tiny"))
    albert.register_classification_head("sentence_order", 2)
    assert default_architecture(albert) == "AlbertForPreTraining"
    discriminator = electra_discriminator(hf_dirs)
    assert default_architecture(discriminator) == "ElectraForPreTraining"
    discriminator.register_classification_head(SEQUENCE_HEAD, 2)
    assert default_architecture(discriminator) == "ElectraForPreTraining"
    plain = RobertaModel(preset("electra-tiny"))
    plain.register_classification_head(SEQUENCE_HEAD, 2)
    assert default_architecture(plain) == "ElectraForSequenceClassification"


@pytest.mark.parametrize(
    "name,changes,message",
    [
        (
            "bert-tiny",
            {"encoder_normalize_before": True},
            "transformers' BERT/RoBERTa/ALBERT are post-LN with an embedding LayerNorm and a tied LM head; this "
            "model differs (pre-LN, no embedding LayerNorm or untied head)",
        ),
        (
            "bert-tiny",
            {"layernorm_embedding": False},
            "transformers' BERT/RoBERTa/ALBERT are post-LN with an embedding LayerNorm and a tied LM head; this "
            "model differs (pre-LN, no embedding LayerNorm or untied head)",
        ),
        (
            "tiny",
            {"untie_weights": True},
            "transformers' BERT/RoBERTa/ALBERT are post-LN with an embedding LayerNorm and a tied LM head; this "
            "model differs (pre-LN, no embedding LayerNorm or untied head)",
        ),
        (
            "bert-tiny",
            {"share_layers": "all"},
            "transformers' bert has no shared layers; this model has share_layers='all'",
        ),
        (
            "tiny",
            {"embedding_size": 16},
            "transformers' roberta has no factorized embeddings; this model's are 16 wide",
        ),
        (
            "bert-tiny",
            {"position_style": "fairseq"},
            "transformers' bert uses absolute positions; this model has position_style='fairseq'",
        ),
        (
            "tiny",
            {"position_style": "absolute"},
            "transformers' roberta uses fairseq positions; this model has position_style='absolute'",
        ),
    ],
)
def test_models_transformers_cannot_hold_are_refused(name, changes, message):
    model = RobertaModel(preset(name, **changes))
    with pytest.raises(ValueError, match=re.escape(message) + "$"):
        transformers_config(model, "BertForMaskedLM")


def test_factorized_and_shared_models_of_families_that_have_them_are_written():
    assert (
        transformers_config(RobertaModel(preset("tiny", embedding_size=32)), "RobertaForMaskedLM")["hidden_size"] == 32
    )
    albert = RobertaModel(preset("albert-tiny"))
    assert transformers_config(albert, "AlbertForMaskedLM")["embedding_size"] == 16


@pytest.mark.parametrize(
    "architecture,message",
    [
        (
            "BertForSequenceClassification",
            "BertForSequenceClassification needs the head 'classifier', which this model does not have "
            "(its heads: ['next_sentence', 'qa'])",
        ),
        (
            "BertForTokenClassification",
            "BertForTokenClassification needs the head 'tagger', which this model does not have "
            "(its heads: ['next_sentence', 'qa'])",
        ),
    ],
)
def test_a_classification_architecture_needs_its_head(tmp_path, architecture, message):
    model = RobertaModel(preset("bert-tiny"))
    model.register_classification_head("next_sentence", 2)
    model.register_token_head(QA_HEAD, 2)
    with pytest.raises(ValueError, match=re.escape(message) + "$"):
        save_transformers(model, tmp_path / "out", architecture=architecture)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "architecture,head",
    [
        ("BertForSequenceClassification", "classification_heads.classifier"),
        ("BertForPreTraining", "classification_heads.next_sentence"),
        ("BertForQuestionAnswering", "token_heads.qa"),
        ("BertForTokenClassification", "token_heads.tagger"),
    ],
)
def test_the_state_dict_of_an_architecture_needs_its_heads(architecture, head):
    message = f"{architecture} needs the head {head!r}, which this model does not have"
    with pytest.raises(ValueError, match=re.escape(message) + "$"):
        transformers_state_dict(RobertaModel(preset("bert-tiny")), architecture)


def test_shared_albert_layers_are_written_once_and_key_maps_name_every_layer():
    model = RobertaModel(preset("albert-tiny"))
    written = transformers_state_dict(model, "AlbertForMaskedLM")
    layer_keys = [k for k in written if ".albert_layers." in k]
    assert layer_keys and all(".albert_layer_groups.0.albert_layers.0." in k for k in layer_keys)
    mapping = key_map(model.cfg, "AlbertForMaskedLM")
    assert (
        mapping["encoder.sentence_encoder.layers.1.fc1.weight"]
        == "albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight"
    )
    bert = key_map(RobertaModel(preset("bert-tiny")).cfg, "BertForMaskedLM", base_prefix="")
    assert bert["encoder.sentence_encoder.layers.1.fc2.bias"] == "encoder.layer.1.output.dense.bias"
    assert bert["encoder.lm_head.bias"] == "cls.predictions.bias"
    assert "encoder.lm_head.bias" not in key_map(RobertaModel(preset("bert-tiny")).cfg, "BertModel")
    assert "encoder.lm_head.bias" not in key_map(RobertaModel(preset("electra-tiny")).cfg, "ElectraForMaskedLM")


def test_the_architecture_suffix_is_the_last_for_word():
    cfg = RobertaModel(preset("bert-tiny")).cfg
    assert key_map(cfg, "MyBertForMaskedLM") == key_map(cfg, "BertForMaskedLM")
    assert key_map(cfg, "BertForMaskedLM2") == key_map(cfg, "BertModel")
    assert key_map(cfg, "ForPreTrainingBertForMaskedLM") == key_map(cfg, "BertModel")


def test_written_tensors_are_copies_of_the_models():
    model = RobertaModel(preset("bert-tiny"))
    written = transformers_state_dict(model, "BertForMaskedLM")
    for tensor in written.values():
        tensor.fill_(7.0)
    assert not any(bool((tensor == 7.0).all()) for tensor in model.state_dict().values())


def test_a_pytorch_model_bin_that_imports_code_is_refused_as_a_transformers_weights_file(tmp_path):
    import datetime

    torch.save({"a": datetime.date(2020, 1, 1)}, tmp_path / "pytorch_model.bin")
    message = (
        f"refusing to load {str(tmp_path / 'pytorch_model.bin')!r}: it asks to import datetime.date, which a "
        "transformers weights file does not need; loading never executes code from the file, so it imports only "
        "tensors and inert types, and nothing from the file was executed"
    )
    with pytest.raises(CheckpointError, match=re.escape(message) + "$"):
        read_weights(tmp_path)


def test_an_unsupported_config_names_the_folders_config_json(hf_dirs, tmp_path):
    config, tensors = folder_of(hf_dirs, "BertForMaskedLM")
    directory = write_folder(tmp_path / "m", {**config, "hidden_act": "swish"}, tensors)
    message = (
        f"{str(directory / 'config.json')!r}: hidden_act 'swish' is not supported; known: "
        "['gelu', 'gelu_fast', 'gelu_new', 'gelu_pytorch_tanh', 'linear', 'relu', 'tanh']"
    )
    with pytest.raises(CheckpointError, match=re.escape(message) + "$"):
        load_transformers(directory)


def test_strict_loading_messages_use_the_files_own_names(hf_dirs, tmp_path):
    config, tensors = folder_of(hf_dirs, "BertForMaskedLM")
    tensors["bert.encoder.layer.1.output.dense.weight"] = torch.zeros(3, 3)
    directory = write_folder(tmp_path / "shape", config, tensors)
    message = (
        f"{str(directory) + ' (BertForMaskedLM)'!r}: bert.encoder.layer.1.output.dense.weight has shape (3, 3), "
        "our encoder.sentence_encoder.layers.1.fc2.weight expects (32, 37)"
    )
    with pytest.raises(CheckpointError, match=re.escape(message) + "$"):
        load_transformers(directory)
    del tensors["bert.encoder.layer.1.output.dense.weight"]
    directory = write_folder(tmp_path / "missing", config, tensors)
    message = (
        f"{str(directory) + ' (BertForMaskedLM)'!r} does not match a bert model: parameters not in the file "
        "['encoder.sentence_encoder.layers.1.fc2.weight <- bert.encoder.layer.1.output.dense.weight'], "
        "tensors of the file nothing takes []"
    )
    with pytest.raises(CheckpointError, match=re.escape(message) + "$"):
        load_transformers(directory)


def test_loaded_models_keep_fairseqs_format_marker(hf_dirs):
    model = load_transformers(hf_dirs["BertForMaskedLM"][1]).model
    assert torch.equal(model.state_dict()["encoder.sentence_encoder.version"], torch.Tensor([3]))


def test_a_one_layer_albert_loads(tmp_path):
    theirs = hf_model("albert", "AlbertForMaskedLM", num_hidden_layers=1)
    model = load_transformers(save(theirs, tmp_path)).model
    assert model.cfg.encoder_layers == 1
    written = transformers_state_dict(model, "AlbertForMaskedLM")
    for key, tensor in their_tensors(theirs, "AlbertForMaskedLM", "albert").items():
        assert torch.equal(written[key], tensor), key
