"""ELECTRA, SpanBERT and extractive QA through fairseq's real command-line tools, on data the
test builds (standard-library docstrings and generated QA contexts on the tests' BPE vocabulary,
``fairseq-preprocess``), then ``fairseq-train --user-dir``:

* ELECTRA (``--task roberta_ext_electra --criterion roberta_ext_electra --arch electra_ext_small``)
  and SpanBERT (``--task roberta_ext_spanbert --criterion roberta_ext_spanbert --arch
  spanbert_ext_base``) pretrain with every logged loss falling, and their checkpoints serve the
  encoder (the discriminator, with its head);
* QA (``--task roberta_ext_extractive_qa``) fine-tunes the pretrained SpanBERT encoder (its span
  boundary head dropped on restore), and the hub, loading the result without fairseq's help, answers held-out
  questions about made-up countries well above chance; fine-tuning from ELECTRA keeps the
  discriminator alone.

Every run is tiny (2 layers, 64 wide) and uses one thread per process (``OMP_NUM_THREADS=1``):
on a shared 2-core machine that is faster than two, and deterministic.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest
import torch

from tests.peers import require

require("fairseq", "the tests run fairseq-preprocess and fairseq-train")

from roberta_ext import qa
from roberta_ext.checkpoints.fairseq import config_from_checkpoint, model_options, upgrade_state_dict
from roberta_ext.checkpoints.safe_load import load_checkpoint_file
from roberta_ext.families import electra, spanbert
from roberta_ext.modeling import RobertaModel
from roberta_ext.quickstart import stdlib_docstrings
from roberta_ext.tokenizers import GPT2BPE
from tests.fairseq_plugin.tools import USER_DIR, log_records, run
from tests.test_qa import make_qa_records

TINY = [
    "--encoder-layers",
    "2",
    "--encoder-embed-dim",
    "64",
    "--encoder-ffn-embed-dim",
    "128",
    "--encoder-attention-heads",
    "4",
    "--max-positions",
    "128",
]
COMMON = [
    "--user-dir",
    USER_DIR,
    "--cpu",
    "--num-workers",
    "0",
    "--seed",
    "1",
    "--log-format",
    "json",
    "--no-epoch-checkpoints",
    "--optimizer",
    "adam",
    "--adam-betas",
    "(0.9,0.98)",
    "--clip-norm",
    "1.0",
]
PRETRAIN = [
    *COMMON,
    "--disable-validation",
    "--log-interval",
    "10",
    "--tokens-per-sample",
    "64",
    "--batch-size",
    "16",
    "--lr",
    "1e-3",
    "--max-update",
    "100",
]
ELECTRA_MODEL = ["--arch", "electra_ext_small", *TINY, "--embedding-size", "32"]  # generator: 16 wide


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def falls(records: list[dict], key: str, by: float) -> None:
    values = [float(r[key]) for r in records]
    assert len(values) >= 6, values
    assert mean(values[-3:]) < mean(values[:3]) - by, (key, values)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, bpe_files) -> dict:
    """Pretraining data (docstring sentences and QA contexts) and a QA data directory, on the
    tests' BPE vocabulary."""
    root = tmp_path_factory.mktemp("electra_spanbert")
    docs = [text for text, _ in stdlib_docstrings()]
    random.Random(0).shuffle(docs)
    sentences = [s.strip().replace("\n", " ") for d in docs for s in d.split(". ") if 20 < len(s.strip()) < 160]
    qa_train = make_qa_records(random.Random(0), 20000)
    lines = sentences[:3000] + [r["context"] for r in qa_train[:2000]]
    random.Random(1).shuffle(lines)
    bpe = GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe)
    encoded = [" ".join(map(str, bpe.encode(line))) for line in lines]
    for split, rows in (("train", encoded[300:]), ("valid", encoded[:300])):
        (root / f"{split}.bpe").write_text("".join(row + "\n" for row in rows), encoding="utf-8")
    data = root / "data-bin"
    run(
        "fairseq-preprocess",
        "--only-source",
        "--srcdict",
        str(bpe_files.dict_txt),
        "--trainpref",
        str(root / "train.bpe"),
        "--validpref",
        str(root / "valid.bpe"),
        "--destdir",
        str(data),
        "--workers",
        "1",
    )

    qa_data = root / "qa-data"
    qa_data.mkdir()
    for path in (bpe_files.encoder_json, bpe_files.vocab_bpe):  # span masking's word starts; QA's tokenizer
        shutil.copy(path, data / Path(path).name)
        shutil.copy(path, qa_data / Path(path).name)
    shutil.copy(bpe_files.dict_txt, qa_data / "dict.txt")
    (qa_data / "train.json").write_text(json.dumps(qa_train))
    (qa_data / "valid.json").write_text(json.dumps(make_qa_records(random.Random(1), 200)))
    held_out = qa.parse_examples(make_qa_records(random.Random(2), 300))
    return {"root": root, "data": data, "qa_data": qa_data, "held_out": held_out}


@pytest.fixture(scope="module")
def electra_run(workspace) -> dict:
    save_dir = workspace["root"] / "electra"
    log = run(
        "fairseq-train",
        str(workspace["data"]),
        "--task",
        "roberta_ext_electra",
        "--criterion",
        "roberta_ext_electra",
        *ELECTRA_MODEL,
        *PRETRAIN,
        "--save-dir",
        str(save_dir),
    )
    return {"log": log, "checkpoint": save_dir / "checkpoint_last.pt"}


@pytest.fixture(scope="module")
def spanbert_run(workspace) -> dict:
    save_dir = workspace["root"] / "spanbert"
    log = run(
        "fairseq-train",
        str(workspace["data"]),
        "--task",
        "roberta_ext_spanbert",
        "--criterion",
        "roberta_ext_spanbert",
        "--arch",
        "spanbert_ext_base",
        *TINY,
        *PRETRAIN,
        "--save-dir",
        str(save_dir),
    )
    return {"log": log, "checkpoint": save_dir / "checkpoint_last.pt"}


def test_electra_pretraining_losses_fall(electra_run):
    records = log_records(electra_run["log"])
    assert "ELECTRA generator: 16 wide, 1 heads" in electra_run["log"]
    falls(records, "loss", 5.0)  # gen_loss + 50 * disc_loss
    falls(records, "gen_loss", 0.3)
    falls(records, "disc_loss", 0.1)
    # Early on the discriminator calls every token original; then it learns to spot replacements
    # (and, as the generator improves, they get harder to spot again).
    found = [float(r["disc_acc_replaced"]) for r in records]
    assert found[1] < 5 and max(found) > 15, found
    assert all(float(r["disc_acc_original"]) > 80 and 50 < float(r["replaced"]) <= 100 for r in records), records


def test_spanbert_pretraining_losses_fall(spanbert_run):
    records = log_records(spanbert_run["log"])
    falls(records, "mlm_loss", 1.0)
    falls(records, "sbo_loss", 1.0)
    for r in records:
        assert abs(float(r["loss"]) - float(r["mlm_loss"]) - float(r["sbo_loss"])) < 0.01, r


def served_state(path: Path) -> tuple[dict, dict]:
    state = load_checkpoint_file(path)
    options, _ = model_options(state)
    return upgrade_state_dict(state["model"]), options


def test_electra_checkpoint_serves_the_discriminator_and_its_head(workspace, electra_run):
    """What the hub loader does with an ELECTRA pretraining checkpoint (generator dropped, the
    head kept) gives the discriminator fairseq trained."""
    from fairseq import checkpoint_utils

    state_dict, options = served_state(electra_run["checkpoint"])
    state_dict = electra.discriminator_state(state_dict)
    cfg = config_from_checkpoint(state_dict, options, str(electra_run["checkpoint"]))
    assert (cfg.family, cfg.embed_dim, cfg.position_style, cfg.type_vocab_size) == ("electra", 32, "absolute", 2)
    assert electra.has_discriminator_head(state_dict)
    ours = electra.ElectraDiscriminator(cfg)
    ours.load_state_dict(state_dict, strict=True)
    ours.eval()

    models, _, _ = checkpoint_utils.load_model_ensemble_and_task(
        [str(electra_run["checkpoint"])], arg_overrides={"data": str(workspace["data"])}
    )
    theirs = models[0].eval()
    assert hasattr(theirs, "generator")  # built for its task, roberta_ext_electra
    tokens = torch.tensor([[0, 100, 200, 300, 400, 2], [0, 50, 60, 2, 1, 1]])
    torch.testing.assert_close(electra.replaced_token_probs(ours, tokens), electra.replaced_token_probs(theirs, tokens))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens, features_only=True)[0], theirs(tokens, features_only=True)[0])


def test_hub_loads_the_electra_checkpoint_and_detects_replacements(workspace, electra_run, bpe_files):
    """from_pretrained on the pretraining checkpoint itself: the generator is dropped, the
    discriminator and its head serve, and replaced_token_probs equals the model's own."""
    import roberta_ext

    hub = roberta_ext.from_pretrained(
        str(electra_run["checkpoint"].parent),
        "checkpoint_last.pt",
        str(workspace["data"]),
        gpt2_encoder_json=str(bpe_files.encoder_json),
        gpt2_vocab_bpe=str(bpe_files.vocab_bpe),
    )
    assert hub.model.cfg.family == "electra" and not hasattr(hub.model, "generator")
    text = "Return the list of all the names in the module."
    tokens = hub.encode(text)
    assert tokens.tolist().count(2) == 1
    probs = hub.replaced_token_probs(text)
    assert len(probs) == len(tokens) - 2 and all(0.0 <= p <= 1.0 for _, p in probs)
    expected = electra.replaced_token_probs(hub.model, tokens[None])[0, 1:-1]
    torch.testing.assert_close(torch.tensor([p for _, p in probs]), expected)
    assert "".join(token for token, _ in probs) == text


def test_spanbert_checkpoint_serves_the_encoder(spanbert_run):
    state_dict, options = served_state(spanbert_run["checkpoint"])
    assert any(k.startswith("sbo_head.") for k in state_dict)
    state_dict = spanbert.encoder_state(state_dict)
    cfg = config_from_checkpoint(state_dict, options, str(spanbert_run["checkpoint"]))
    assert cfg.family == "spanbert"
    RobertaModel(cfg).load_state_dict(state_dict, strict=True)


QA_TRAIN = [
    *COMMON,
    "--dropout",
    "0",
    "--attention-dropout",
    "0",
    "--batch-size",
    "32",
    "--lr",
    "3e-3",
    "--lr-scheduler",
    "polynomial_decay",
    "--warmup-updates",
    "100",
    "--weight-decay",
    "0.01",
    "--reset-optimizer",
    "--reset-dataloader",
    "--reset-meters",
    "--reset-lr-scheduler",
]


def test_electra_fine_tuning_keeps_only_the_discriminator(workspace, electra_run):
    """Same --arch, another task: the restored checkpoint's generator and head are dropped,
    and what fine-tuning saves is a plain encoder checkpoint."""
    save_dir = workspace["root"] / "electra-qa"
    log = run(
        "fairseq-train",
        str(workspace["qa_data"]),
        "--task",
        "roberta_ext_extractive_qa",
        "--criterion",
        "roberta_ext_extractive_qa",
        *ELECTRA_MODEL,
        *QA_TRAIN,
        "--total-num-update",
        "20",
        "--max-update",
        "20",
        "--disable-validation",
        "--log-interval",
        "5",
        "--save-dir",
        str(save_dir),
        "--restore-file",
        str(electra_run["checkpoint"]),
    )
    assert re.search(r"not loading \d+ tensors of 'generator'", log), log[-3000:]
    assert re.search(r"not loading \d+ tensors of 'discriminator_head'", log), log[-3000:]
    assert "pair layout: PairLayout(double_separator=False, segments=True)" in log  # [CLS] q [SEP] c [SEP]
    state_dict, _ = served_state(save_dir / "checkpoint_last.pt")
    assert not any(k.startswith(("generator.", "discriminator_head.")) for k in state_dict)
    assert "token_heads.qa.out_proj.weight" in state_dict


@pytest.fixture(scope="module")
def qa_run(workspace, spanbert_run) -> dict:
    """Fine-tune the pretrained SpanBERT encoder for QA (its span boundary head is dropped).

    Matching the question's relation to the context is learned late, and only while the
    learning rate is still high: the rate decays as over 5,000 updates and training stops at
    1,600. Measured held-out exact match (answerable, overall): 0.79 and 0.81 here; 0.80 and 0.72
    when the rate decayed to 0 over 2,000 updates (140 s of a make test); 0.45 and 0.39 when it
    decayed over 1,200; and 0.68, 0.60 after 1,200 updates of this schedule."""
    save_dir = workspace["root"] / "qa"
    log = run(
        "fairseq-train",
        str(workspace["qa_data"]),
        "--task",
        "roberta_ext_extractive_qa",
        "--criterion",
        "roberta_ext_extractive_qa",
        "--arch",
        "spanbert_ext_base",
        *TINY,
        *QA_TRAIN,
        "--total-num-update",
        "5000",
        "--max-update",
        "1600",
        "--log-interval",
        "100",
        "--validate-interval-updates",
        "800",
        "--save-dir",
        str(save_dir),
        "--restore-file",
        str(spanbert_run["checkpoint"]),
    )
    return {"log": log, "save_dir": save_dir}


def test_qa_fine_tuning_loss_falls(qa_run):
    log = qa_run["log"]
    assert re.search(r"not loading \d+ tensors of 'sbo_head'", log), log[-3000:]
    falls(log_records(log), "loss", 1.0)
    valid = log_records(log, "valid")
    assert float(valid[-1]["valid_loss"]) < float(valid[0]["valid_loss"]) - 0.5, valid


def test_hub_answers_held_out_questions(workspace, qa_run):
    """Held-out questions name countries and answers never seen in training. A reader who knows
    the answer is the name after a relation word, but not which relation is asked, is right
    about 1 time in 2.4 on answerable questions (2-3 facts per context)."""
    import roberta_ext

    qa_data = workspace["qa_data"]
    hub = roberta_ext.from_pretrained(
        str(qa_run["save_dir"]),
        "checkpoint_last.pt",
        str(qa_data),
        gpt2_encoder_json=str(qa_data / "encoder.json"),
        gpt2_vocab_bpe=str(qa_data / "vocab.bpe"),
    )
    assert hub.model.cfg.family == "spanbert" and "sbo_head" not in dict(hub.model.named_children())
    right = {True: 0, False: 0}
    total = {True: 0, False: 0}
    for example in workspace["held_out"]:
        answer = hub.answer(example.question, example.context)
        gold = example.answers[0][0] if example.answers else ""
        if answer:
            assert example.context[answer.start : answer.end] == answer.text
        total[bool(gold)] += 1
        right[bool(gold)] += answer.text == gold
    answerable = right[True] / total[True]
    overall = (right[True] + right[False]) / (total[True] + total[False])
    print(f"held-out exact match: answerable {answerable:.3f}, overall {overall:.3f} ({right}, {total})")
    assert answerable > 0.6, (right, total)
    assert overall > 0.55, (right, total)
