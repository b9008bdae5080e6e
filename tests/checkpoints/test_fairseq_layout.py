"""fairseq checkpoint layouts (roberta_ext/checkpoints/fairseq.py): every key layout fairseq ever
saved upgraded as fairseq's own ``RobertaModel.upgrade_state_dict_named`` upgrades it, the options of
``args`` and ``cfg`` files, the config fairseq's architectures define, and save/load round trips of
tiny models, tensor for tensor."""

from __future__ import annotations

import argparse
import re

import pytest
import torch

from roberta_ext.checkpoints import CheckpointError, load_checkpoint_file
from roberta_ext.checkpoints.fairseq import (
    LoadedCheckpoint,
    _heads,
    bpe_options,
    config_from_checkpoint,
    config_from_fairseq,
    load_roberta_checkpoint,
    model_options,
    save_roberta_checkpoint,
    upgrade_state_dict,
)
from roberta_ext.families import preset
from roberta_ext.modeling import RobertaModel
from roberta_ext.modeling.config import CHECKPOINT_OPTIONS, FAIRSEQ_NAMES
from tests.peers import require

PREFIX = "encoder.sentence_encoder."
VERSION = PREFIX + "version"
TINY = dict(encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_attention_heads=4)


def fairseq_roberta():
    """A tiny fairseq ``RobertaModel`` (64 symbols, random weights) and its architecture's args."""
    model_module = require("fairseq.models.roberta.model", "fairseq's RobertaModel is the reference")
    dictionary = require("fairseq.data", "fairseq's Dictionary").Dictionary()
    for index in range(59):
        dictionary.add_symbol(f"w{index}")
    dictionary.add_symbol("<mask>")
    args = argparse.Namespace(**TINY, max_positions=64)
    model_module.base_architecture(args)
    task = argparse.Namespace(source_dictionary=dictionary)
    torch.manual_seed(0)
    model = model_module.RobertaModel.build_model(args, task)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter))
    return model, args


@pytest.fixture(scope="module")
def fairseq_model():
    model, _ = fairseq_roberta()
    model.register_classification_head("mnli", num_classes=3, inner_dim=8)
    with torch.no_grad():
        for parameter in model.classification_heads.parameters():
            parameter.copy_(torch.randn_like(parameter))
    return model


def modern_state(model) -> dict[str, torch.Tensor]:
    return {key: tensor.clone() for key, tensor in model.state_dict().items()}


def release_2019(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The keys of the 2019 files: ``decoder.``, ``emb_layer_norm``, q/k/v fused, no version."""
    old = {}
    for key, tensor in state.items():
        if key == VERSION or ".self_attn.k_proj." in key or ".self_attn.v_proj." in key:
            continue
        if ".self_attn.q_proj." in key:
            tensor = torch.cat([state[key.replace("q_proj", name)] for name in ("q_proj", "k_proj", "v_proj")])
            key = key.replace("q_proj.", "in_proj_")
        old[re.sub(r"^encoder\.", "decoder.", key).replace(".layernorm_embedding.", ".emb_layer_norm.")] = tensor
    return old


def layer_norms_before_0_6(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """fairseq < 0.6's names of each layer's two LayerNorms."""
    renamed = {".self_attn_layer_norm.": ".layer_norms.0.", ".final_layer_norm.": ".layer_norms.1."}
    old = {}
    for key, tensor in state.items():
        for new, before in renamed.items():
            key = key.replace(new, before)
        old[key] = tensor
    return old


def fairseq_upgrade(model, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    upgraded = dict(state)
    model.upgrade_state_dict_named(upgraded, "")
    return upgraded


def assert_same_tensors(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> None:
    assert sorted(ours) == sorted(theirs)
    for key, tensor in theirs.items():
        assert ours[key].dtype == tensor.dtype and torch.equal(ours[key], tensor), key


LAYOUTS = {
    "modern": lambda state: state,
    "release_2019": release_2019,
    "layer_norms_before_0_6": layer_norms_before_0_6,
    "release_2019_with_old_layer_norms": lambda state: layer_norms_before_0_6(release_2019(state)),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_upgrades_as_fairseq_upgrades_it(fairseq_model, layout):
    modern = modern_state(fairseq_model)
    old = LAYOUTS[layout](modern)
    theirs = fairseq_upgrade(fairseq_model, old)
    ours = upgrade_state_dict(old)
    # fairseq marks a file without a version as version 1 (no final LayerNorm): ours reads that
    # from the keys and keeps today's version.
    assert torch.equal(theirs.pop(VERSION), torch.Tensor([3] if VERSION in old else [1]))
    assert torch.equal(ours.pop(VERSION), torch.Tensor([3]))
    assert_same_tensors(ours, theirs)
    modern.pop(VERSION)
    assert_same_tensors(ours, modern)


def test_the_upgrade_leaves_its_input_as_it_was(fairseq_model):
    old = release_2019(modern_state(fairseq_model))
    keys = list(old)
    upgrade_state_dict(old)
    assert list(old) == keys


def test_a_fused_projection_splits_into_q_k_v_in_that_order_along_rows():
    weight = torch.arange(24.0).reshape(6, 4)
    bias = torch.arange(6.0) + 100
    ours = upgrade_state_dict(
        {"decoder.sentence_encoder.layers.3.self_attn.in_proj_weight": weight, "x.self_attn.in_proj_bias": bias}
    )
    assert_same_tensors(
        ours,
        {
            PREFIX + "layers.3.self_attn.q_proj.weight": weight[:2],
            PREFIX + "layers.3.self_attn.k_proj.weight": weight[2:4],
            PREFIX + "layers.3.self_attn.v_proj.weight": weight[4:],
            "x.self_attn.q_proj.bias": bias[:2],
            "x.self_attn.k_proj.bias": bias[2:4],
            "x.self_attn.v_proj.bias": bias[4:],
            VERSION: torch.Tensor([3]),
        },
    )


def test_only_whole_names_at_their_place_are_renamed():
    kept = {
        "model.decoder.x": torch.zeros(1),
        "decoderx.y": torch.zeros(1),
        "a.emb_layer_normx.weight": torch.zeros(1),
        "emb_layer_norm.weight": torch.zeros(1),
        "a.layer_norms.2.weight": torch.zeros(1),
        "a.self_attn.in_proj_weightx": torch.zeros(3),
        "in_proj_weight": torch.zeros(3),
        VERSION: torch.Tensor([2]),
    }
    assert_same_tensors(upgrade_state_dict(kept), kept)


def test_the_sinusoidal_positions_placeholder_is_dropped():
    ours = upgrade_state_dict({PREFIX + "embed_positions._float_tensor": torch.zeros(1), "decoder.a": torch.ones(1)})
    assert_same_tensors(ours, {"encoder.a": torch.ones(1), VERSION: torch.Tensor([3])})


def test_model_and_task_options_of_each_way_a_checkpoint_records_them():
    model = {"arch": "roberta_base", "encoder_layers": 2}
    assert model_options({"cfg": {"model": model, "task": {"_name": "masked_lm"}}}) == (model, {"_name": "masked_lm"})
    assert model_options({"cfg": {"model": model, "task": None}}) == (model, {})
    assert model_options({"cfg": {"model": model}}) == (model, {})
    args = {"arch": "roberta_large", "task": "sentence_prediction"}
    assert model_options({"cfg": {"model": None}, "args": args}) == (args, {"_name": "sentence_prediction"})
    assert model_options({"cfg": None, "args": args}) == (args, {"_name": "sentence_prediction"})
    assert model_options({"args": {"arch": "x"}}) == ({"arch": "x"}, {"_name": None})
    assert model_options({"cfg": None, "args": None}) == ({}, {})
    assert model_options({}) == ({}, {})


def test_the_options_are_copies():
    model, task = {"encoder_layers": 2}, {"_name": "masked_lm"}
    options, task_options = model_options({"cfg": {"model": model, "task": task}})
    options["encoder_layers"] = 3
    task_options["_name"] = "x"
    assert model == {"encoder_layers": 2} and task == {"_name": "masked_lm"}


def write_checkpoint(path, **state) -> str:
    torch.save({"model": {}, **state}, path)
    return str(path)


def test_an_args_namespace_and_an_omegaconf_cfg_give_their_options(tmp_path):
    args = argparse.Namespace(arch="roberta_large", task="masked_lm", bpe="gpt2", gpt2_encoder_json="e.json")
    state = load_checkpoint_file(write_checkpoint(tmp_path / "args.pt", args=args))
    assert model_options(state) == (vars(args), {"_name": "masked_lm"})
    assert bpe_options(state) == {"_name": "gpt2", "gpt2_encoder_json": "e.json"}
    omegaconf = require("omegaconf", "fairseq >= 0.10 saves its cfg as an omegaconf DictConfig")
    cfg = omegaconf.OmegaConf.create(
        {"model": {"_name": "roberta", "encoder_layers": 2}, "task": {"_name": "masked_lm"}, "bpe": {"_name": "bert"}}
    )
    state = load_checkpoint_file(write_checkpoint(tmp_path / "cfg.pt", args=None, cfg=cfg))
    assert model_options(state) == ({"_name": "roberta", "encoder_layers": 2}, {"_name": "masked_lm"})
    assert bpe_options(state) == {"_name": "bert"}


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (
            {"cfg": {"model": {}, "bpe": {"_name": "gpt2", "gpt2_encoder_json": "e"}}},
            {"_name": "gpt2", "gpt2_encoder_json": "e"},
        ),
        ({"cfg": {"model": {}, "bpe": {1: "x", "_name": "bert"}}}, {"1": "x", "_name": "bert"}),
        ({"cfg": {"model": {}, "bpe": {"_name": None, "bpe_cased": True}}}, {}),
        ({"cfg": {"model": {}, "bpe": None}}, {}),
        ({"cfg": {"model": {}, "bpe": "gpt2"}}, {}),
        ({"cfg": {"model": {}}, "args": {"bpe": "gpt2"}}, {}),
        ({"cfg": {"task": {}}, "args": {"bpe": "gpt2"}}, {"_name": "gpt2"}),
        (
            {"args": {"bpe": "sentencepiece", "sentencepiece_model": "spm.model", "bpe_cased": None, "other": 1}},
            {"_name": "sentencepiece", "sentencepiece_model": "spm.model"},
        ),
        (
            {
                "args": {
                    "bpe": "gpt2",
                    "gpt2_encoder_json": "e",
                    "gpt2_vocab_bpe": "v",
                    "bpe_vocab_file": "f",
                    "bpe_cased": False,
                    "sentencepiece_model": "s",
                }
            },
            {
                "_name": "gpt2",
                "gpt2_encoder_json": "e",
                "gpt2_vocab_bpe": "v",
                "bpe_vocab_file": "f",
                "bpe_cased": False,
                "sentencepiece_model": "s",
            },
        ),
        ({"args": {"bpe": None, "gpt2_encoder_json": "x"}}, {}),
        ({"args": {"gpt2_encoder_json": "x"}}, {}),
        ({"args": None}, {}),
        ({}, {}),
    ],
)
def test_bpe_options_of_cfg_and_args(state, expected):
    assert bpe_options(state) == expected


FAIRSEQ_ARCHITECTURES = {
    "roberta": "base",
    "roberta_base": "base",
    "roberta_large": "large",
    "roberta_prenorm": None,
    "xlm": None,
}


@pytest.mark.parametrize("arch", sorted(FAIRSEQ_ARCHITECTURES))
def test_each_fairseq_architecture_gives_its_own_defaults(arch):
    registry = require("fairseq.models", "fairseq's architectures are the reference").ARCH_CONFIG_REGISTRY
    args = argparse.Namespace(arch=arch)
    registry[arch](args)
    cfg = config_from_fairseq(vars(args))
    fairseq_values = vars(args)
    for ours, theirs in FAIRSEQ_NAMES.items():
        if theirs in fairseq_values:
            assert getattr(cfg, ours) == fairseq_values[theirs], ours
    assert cfg.max_positions == 512
    if FAIRSEQ_ARCHITECTURES[arch]:
        assert cfg == preset(FAIRSEQ_ARCHITECTURES[arch])


def test_options_read_overrides_and_what_is_ignored():
    cfg = config_from_fairseq(
        {"_name": "x", "encoder_layers": None, "dropout": 0.3, "vocab_size": 100, "layers": 5}, encoder_embed_dim=96
    )
    assert cfg == preset("base", dropout=0.3, vocab_size=100, encoder_embed_dim=96)
    assert config_from_fairseq({}) == preset("base")
    assert config_from_fairseq({"arch": None, "_name": "my_large"}) == preset("large")
    assert config_from_fairseq({"arch": "large_one", "_name": "base"}) == preset("large")


def tiny_state(**options) -> dict[str, torch.Tensor]:
    return dict(RobertaModel(preset("tiny", **options)).state_dict())


def test_the_config_of_a_checkpoint_comes_from_its_tensors_and_options():
    cfg = config_from_checkpoint(tiny_state(), {"arch": "roberta_base", "encoder_attention_heads": 4}, "m.pt")
    assert cfg == preset("tiny", encoder_layers=2, max_positions=64)
    pre_ln = tiny_state(encoder_normalize_before=True, layernorm_embedding=False, pooler=True, type_vocab_size=2)
    options = {"encoder_attention_heads": 4, "activation_fn": "relu"}
    assert config_from_checkpoint(pre_ln, options, "m.pt") == preset(
        "tiny",
        encoder_normalize_before=True,
        layernorm_embedding=False,
        pooler=True,
        type_vocab_size=2,
        activation_fn="relu",
    )


def test_positions_count_from_padding_idx_unless_absolute():
    state = tiny_state(padding_idx=0)
    heads = {"encoder_attention_heads": 4}
    assert config_from_checkpoint(state, {**heads, "padding_idx": 0}, "m.pt") == preset("tiny", padding_idx=0)
    read_with_pad_1 = preset("tiny", max_positions=63)
    assert config_from_checkpoint(state, {**heads, "padding_idx": None}, "m.pt") == read_with_pad_1
    assert config_from_checkpoint(state, heads, "m.pt") == read_with_pad_1
    assert config_from_checkpoint(state, {**heads, "padding_idx": "0"}, "m.pt") == preset("tiny", padding_idx=0)
    absolute = tiny_state(position_style="absolute")
    assert config_from_checkpoint(absolute, {**heads, "position_style": "absolute"}, "m.pt") == preset(
        "tiny", position_style="absolute"
    )
    assert config_from_checkpoint(absolute, {**heads, "padding_idx": 3}, "m.pt").max_positions == 60


def test_factorized_embeddings_and_layer_count_come_from_the_tensors():
    state = tiny_state(embedding_size=16, encoder_layers=3)
    cfg = config_from_checkpoint(state, {"encoder_attention_heads": 4, "encoder_layers": 7}, "m.pt")
    assert cfg == preset("tiny", embedding_size=16, encoder_layers=3)
    state = {key: tensor for key, tensor in tiny_state(encoder_layers=3).items() if ".layers.1." not in key}
    assert config_from_checkpoint(state, {"encoder_attention_heads": 4}, "m.pt").encoder_layers == 2


@pytest.mark.parametrize("missing", ["embed_tokens.weight", "embed_positions.weight", "layers.0.fc2.weight"])
def test_a_file_without_the_shapes_of_a_roberta_is_refused(missing):
    state = tiny_state()
    del state[PREFIX + missing]
    expected = f"'m.pt' is not a RoBERTa checkpoint: it has no '{PREFIX}{missing}'"
    with pytest.raises(CheckpointError, match=re.escape(expected) + "$"):
        config_from_checkpoint(state, {"encoder_attention_heads": 4}, "m.pt")


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"encoder_attention_heads": 5}, "encoder_embed_dim=32 is not divisible by encoder_attention_heads=5"),
        (
            {"encoder_attention_heads": 4, "activation_fn": "swish"},
            "activation_fn='swish' is not one of ('gelu', 'gelu_accurate', 'relu', 'tanh', 'linear')",
        ),
        ({"encoder_attention_heads": "4"}, "unsupported operand type(s) for %: 'int' and 'str'"),
    ],
)
def test_options_the_config_refuses_name_the_file(options, error):
    with pytest.raises(CheckpointError, match=re.escape(f"'m.pt' has model options we cannot use: {error}") + "$"):
        config_from_checkpoint(tiny_state(), options, "m.pt")


def test_heads_and_their_sizes_as_the_tensors_say():
    def weight(rows):
        return torch.zeros(rows, 2)

    state = {
        "classification_heads.mnli.dense.weight": weight(8),
        "classification_heads.mnli.out_proj.weight": weight(3),
        "classification_heads.pooled.out_proj.weight": weight(2),
        "classification_heads.half.dense.weight": weight(4),
        "classification_heads.mnli.out_proj.bias": torch.zeros(5),
        "token_heads.ner.out_proj.weight": weight(9),
        "token_heads.ner.dense.weight": weight(6),
        "encoder.classification_heads.x.out_proj.weight": weight(1),
        "classification_heads.a.b.out_proj.weight": weight(1),
        "other_heads.y.out_proj.weight": weight(1),
        "classification_heads.z.out_proj.weightx": weight(1),
    }
    assert _heads(state) == {
        "classification_heads": {"mnli": (3, 8), "pooled": (2, None)},
        "token_heads": {"ner": (9, 6)},
    }
    assert _heads({}) == {"classification_heads": {}, "token_heads": {}}


@pytest.fixture(scope="module")
def tiny_model() -> RobertaModel:
    torch.manual_seed(0)
    model = RobertaModel(preset("tiny", encoder_layers=1))
    model.register_classification_head("mnli", num_classes=3, inner_dim=8)
    model.register_classification_head("sst", num_classes=2)
    model.register_token_head("ner", num_labels=5)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter))
    return model


def recorded_options(model: RobertaModel) -> dict:
    """What a checkpoint written here records under ``cfg["model"]``, by fairseq's names."""
    return {
        "_name": "roberta_ext",
        "arch": "roberta_ext",
        **{FAIRSEQ_NAMES[name]: getattr(model.cfg, name) for name in CHECKPOINT_OPTIONS},
    }


def assert_same_model(loaded: RobertaModel, model: RobertaModel) -> None:
    assert loaded.cfg == model.cfg.replace(attention=None)
    assert_same_tensors(dict(loaded.state_dict()), dict(model.state_dict()))


def test_a_saved_model_loads_back_exactly_with_its_heads(tmp_path, tiny_model):
    save_roberta_checkpoint(tiny_model, tmp_path / "model.pt")
    loaded = load_roberta_checkpoint(tmp_path / "model.pt")
    assert isinstance(loaded, LoadedCheckpoint) and loaded.path == str(tmp_path / "model.pt")
    assert_same_model(loaded.model, tiny_model)
    assert not loaded.model.training
    assert {
        name: (head.out_proj.out_features, head.dense.out_features)
        for name, head in loaded.model.classification_heads.items()
    } == {
        "mnli": (3, 8),
        "sst": (2, 32),
    }
    assert {name: head.num_classes for name, head in loaded.model.token_heads.items()} == {"ner": 5}
    assert loaded.task == {"_name": "masked_lm"} and loaded.bpe == {}
    assert loaded.options == recorded_options(tiny_model)
    assert loaded.model.encoder.lm_head.weight is loaded.model.encoder.sentence_encoder.embed_tokens.weight


def test_the_saved_file_is_what_fairseq_reads(tmp_path, tiny_model):
    save_roberta_checkpoint(tiny_model, tmp_path / "model.pt", task={"_name": "sentence_prediction", "num_classes": 3})
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.pt"]
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert_same_tensors(state.pop("model"), dict(tiny_model.state_dict()))
    options = state["cfg"].pop("model")
    assert options == recorded_options(tiny_model)
    assert state == {
        "args": None,
        "cfg": {"task": {"_name": "sentence_prediction", "num_classes": 3}},
        "optimizer_history": [
            {
                "criterion_name": "MaskedLmLoss",
                "optimizer_name": "FairseqAdam",
                "lr_scheduler_state": {"best": None},
                "num_updates": 0,
            }
        ],
        "extra_state": {},
    }


def test_a_half_precision_2019_file_loads_in_float32_with_options_task_and_bpe(tmp_path, fairseq_model):
    _, args = fairseq_roberta()
    args.task, args.bpe, args.gpt2_encoder_json = "masked_lm", "gpt2", "encoder.json"
    state = {key: tensor.half() for key, tensor in release_2019(modern_state(fairseq_model)).items()}
    torch.save({"args": args, "model": state}, tmp_path / "model.pt")
    loaded = load_roberta_checkpoint(str(tmp_path / "model.pt"))
    expected = {key: tensor.half().float() for key, tensor in modern_state(fairseq_model).items()}
    assert_same_tensors(dict(loaded.model.state_dict()), expected)
    assert loaded.options == vars(args) and loaded.task == {"_name": "masked_lm"}
    assert loaded.bpe == {"_name": "gpt2", "gpt2_encoder_json": "encoder.json"}
    assert list(loaded.model.classification_heads) == ["mnli"]
    assert loaded.model.classification_heads["mnli"].dense.out_features == 8


def test_a_modernbert_checkpoint_loads_back_exactly(tmp_path):
    """The plugin's ModernBERT (``modernbert_ext_base``) saves no position table (rotary: its reach is
    the ``max_positions`` option) and a gated FFN whose ``fc1`` is twice ``fc2``'s width: the config
    comes from the options and ``fc2``, and the file loads back tensor for tensor, heads included."""
    torch.manual_seed(0)
    model = RobertaModel(preset("modernbert-tiny", encoder_layers=3, max_positions=96))
    model.register_classification_head("sst", num_classes=2)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter))
    save_roberta_checkpoint(model, tmp_path / "model.pt")
    assert not any("embed_positions" in key for key in torch.load(tmp_path / "model.pt", weights_only=True)["model"])
    loaded = load_roberta_checkpoint(tmp_path / "model.pt").model
    assert_same_model(loaded, model)
    assert (loaded.cfg.encoder_ffn_embed_dim, loaded.cfg.max_positions) == (model.cfg.encoder_ffn_embed_dim, 96)
    tokens = torch.randint(4, 60, (2, 40))
    assert torch.equal(loaded(tokens)[0], model.eval()(tokens)[0])


def test_a_file_that_does_not_fit_names_the_file(tmp_path, tiny_model):
    state = dict(tiny_model.state_dict())
    state["classification_heads.half.dense.weight"] = torch.zeros(4, 32)
    torch.save({"args": None, "cfg": {"model": {"encoder_attention_heads": 4}}, "model": state}, tmp_path / "x.pt")
    path = str(tmp_path / "x.pt")
    expected = (
        f"{path!r} does not match a roberta model: parameters not in the file [], "
        "tensors of the file nothing takes ['classification_heads.half.dense.weight']"
    )
    with pytest.raises(CheckpointError, match=re.escape(expected) + "$"):
        load_roberta_checkpoint(tmp_path / "x.pt")


def test_a_file_without_the_shapes_of_a_roberta_is_refused_by_its_path(tmp_path, tiny_model):
    state = dict(tiny_model.state_dict())
    del state[PREFIX + "layers.0.fc2.weight"]
    torch.save({"args": None, "cfg": {"model": {"encoder_attention_heads": 4}}, "model": state}, tmp_path / "x.pt")
    expected = f"{str(tmp_path / 'x.pt')!r} is not a RoBERTa checkpoint: it has no '{PREFIX}layers.0.fc2.weight'"
    with pytest.raises(CheckpointError, match=re.escape(expected) + "$"):
        load_roberta_checkpoint(tmp_path / "x.pt")


def test_only_floating_tensors_are_made_float32(tmp_path, tiny_model):
    state = {key: tensor.half() for key, tensor in tiny_model.state_dict().items()}
    state[VERSION] = torch.tensor([3])
    torch.save({"args": None, "cfg": {"model": {"encoder_attention_heads": 4}}, "model": state}, tmp_path / "x.pt")
    loaded = dict(load_roberta_checkpoint(tmp_path / "x.pt").model.state_dict())
    assert loaded.pop(VERSION).dtype == torch.int64
    assert {tensor.dtype for tensor in loaded.values()} == {torch.float32}
