"""The hub's ``score_choices`` against the plugin, and fairseq's CommonsenseQA evaluation snippet
on our hub.

* A model fine-tuned with ``--task roberta_ext_multiple_choice`` (choices cut by
  ``--max-option-length``, examples by ``--shorten-method truncate``, both reached by the data):
  ``hub.score_choices(context, choices, max_choice_length=..., truncate=True)`` equals, example
  by example, the logits that the plugin's model computes on the task's batches of the same
  checkpoint loaded by fairseq.
* A model fine-tuned with ``--task roberta_ext_commonsense_qa``: commonsense_qa/README.md's
  evaluation snippet runs on our hub, with fairseq blocked, changed only in its import and
  ``from_pretrained`` line; its accuracy is the plugin's validation accuracy, and
  ``score_choices(..., layout="commonsense_qa")`` equals the snippet's per-choice ``predict``.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import torch

from tests.conftest import run_without_fairseq
from tests.peers import require

require("fairseq", "the models are fine-tuned with fairseq-train and read back by fairseq")

import roberta_ext
from tests.fairseq_plugin.test_multiple_choice import ON_CPU, TINY, choice_rows, cqa_rows, prepare, write_jsonl
from tests.fairseq_plugin.tools import USER_DIR, log_records, run

HEAD = "sentence_classification_head"


def long_rows() -> list[dict]:
    """Rows whose choices pass --max-option-length 10 and whose contexts pass 64 tokens."""
    rows = choice_rows(6, 7)
    for row in rows:
        row["context"] = " ".join([row["context"]] * 8)
        row["choices"] = [f"{choice} It was there again, again and again today." for choice in row["choices"]]
    return rows


def plugin_logits(checkpoint: Path, split: str = "valid") -> dict[int, torch.Tensor]:
    """Example index -> the (N,) logits of the plugin's model on the task's batch, as fairseq
    loads the checkpoint."""
    from fairseq import checkpoint_utils

    import roberta_ext.fairseq_plugin  # noqa: F401  (registers the task)

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    model = models[0].eval()
    task.load_dataset(split)
    dataset = task.dataset(split)
    sample = dataset.collater([dataset[i] for i in range(len(dataset))])
    with torch.no_grad():
        columns = [
            model(**sample[f"net_input{i + 1}"], classification_head_name=HEAD)[0] for i in range(task.args.num_classes)
        ]
    logits = torch.cat(columns, dim=1)  # (B, N)
    return {int(index): row for index, row in zip(sample["id"], logits)}


def test_score_choices_equals_the_plugins_logits(tmp_path, bpe_files):
    rows = {"train": choice_rows(48, 5), "valid": choice_rows(18, 6) + long_rows()}
    data = prepare(tmp_path, bpe_files, rows)
    save_dir = tmp_path / "checkpoints"
    run(
        "fairseq-train",
        str(data),
        *shlex.split(
            f"--user-dir {USER_DIR} --task roberta_ext_multiple_choice --criterion roberta_ext_multiple_choice "
            f"--arch roberta_ext_base {TINY} --max-positions 64 --num-classes 4 --init-token 0 --separator-token 2 "
            "--max-option-length 10 --shorten-method truncate --optimizer adam --lr 1e-3 --batch-size 16 "
            f"--max-update 6 {ON_CPU} --save-dir {save_dir}"
        ),
    )
    expected = plugin_logits(save_dir / "checkpoint_last.pt")
    hub = roberta_ext.from_pretrained(
        save_dir,
        "checkpoint_last.pt",
        str(data),
        gpt2_encoder_json=str(bpe_files.encoder_json),
        gpt2_vocab_bpe=str(bpe_files.vocab_bpe),
    )
    assert len(expected) == len(rows["valid"]) == 24
    with torch.no_grad():
        for index, row in enumerate(rows["valid"]):
            scores = hub.score_choices(row["context"], row["choices"], max_choice_length=10, truncate=True)
            torch.testing.assert_close(scores, expected[index], rtol=1e-5, atol=1e-5)
        # Without truncate=True a long example is refused rather than cut silently.
        with pytest.raises(ValueError, match="exceeds maximum length"):
            hub.score_choices(rows["valid"][-1]["context"], rows["valid"][-1]["choices"])
    with pytest.raises(KeyError, match="no classification head named 'mnli'"):
        hub.score_choices("a", ["b", "c"], head="mnli")
    with pytest.raises(ValueError, match="layout must be"):
        hub.score_choices("a", ["b", "c"], layout="swag")  # type: ignore[arg-type]


# commonsense_qa/README.md's evaluation, with the import of fairseq's RobertaModel and of the
# example task replaced by roberta_ext, and roberta.cuda() left out (no GPU here).
CQA_SNIPPET = """
import json
import torch
import roberta_ext
roberta = roberta_ext.from_pretrained('checkpoints', 'checkpoint_best.pt', 'data/CommonsenseQA')
roberta.eval()  # disable dropout
nsamples, ncorrect = 0, 0
with open('data/CommonsenseQA/valid.jsonl') as h:
    for line in h:
        example = json.loads(line)
        scores = []
        for choice in example['question']['choices']:
            input = roberta.encode(
                'Q: ' + example['question']['stem'],
                'A: ' + choice['text'],
                no_separator=True
            )
            score = roberta.predict('sentence_classification_head', input, return_logits=True)
            scores.append(score)
        pred = torch.cat(scores).argmax()
        answer = ord(example['answerKey']) - ord('A')
        nsamples += 1
        if pred == answer:
            ncorrect += 1

print('Accuracy: ' + str(ncorrect / float(nsamples)))
"""


def test_fairseqs_commonsense_qa_snippet_runs_on_our_hub(tmp_path, bpe_files):
    data = tmp_path / "data" / "CommonsenseQA"
    data.mkdir(parents=True)
    shutil.copy(bpe_files.dict_txt, data / "dict.txt")
    write_jsonl(data / "train.jsonl", cqa_rows(64, 1))
    valid = cqa_rows(25, 2)
    write_jsonl(data / "valid.jsonl", valid)
    save_dir = tmp_path / "checkpoints"
    log = run(
        "fairseq-train",
        str(data),
        *shlex.split(
            f"--user-dir {USER_DIR} --task roberta_ext_commonsense_qa --init-token 0 --bpe gpt2 "
            f"--gpt2-encoder-json {bpe_files.encoder_json} --gpt2-vocab-bpe {bpe_files.vocab_bpe} "
            f"--arch roberta_ext_base {TINY} --max-positions 64 --criterion roberta_ext_multiple_choice "
            f"--num-classes 5 --optimizer adam --lr 1e-3 --batch-size 16 --max-update 8 {ON_CPU} "
            f"--log-format json --no-epoch-checkpoints --best-checkpoint-metric accuracy "
            f"--maximize-best-checkpoint-metric --save-dir {save_dir}"
        ),
    )
    best = max(float(record["valid_accuracy"]) for record in log_records(log, "valid"))
    for name in ("encoder.json", "vocab.bpe"):  # the model folder holds its BPE, as a released one
        shutil.copy(bpe_files.dict_txt.parent / name, save_dir / name)

    result = run_without_fairseq(CQA_SNIPPET, cwd=tmp_path)
    accuracy = float(re.search(r"Accuracy: (\S+)", result.stdout)[1])
    assert accuracy * 100 == pytest.approx(best, abs=0.05)  # fairseq logs one decimal

    hub = roberta_ext.from_pretrained(save_dir, "checkpoint_best.pt", str(data))
    expected = plugin_logits(save_dir / "checkpoint_best.pt")
    with torch.no_grad():
        for index, example in enumerate(valid):
            stem, texts = example["question"]["stem"], [c["text"] for c in example["question"]["choices"]]
            one_by_one = torch.cat(
                [hub.predict(HEAD, hub.encode("Q: " + stem, "A: " + t, no_separator=True), True) for t in texts]
            )[:, 0]
            batched = hub.score_choices("Q: " + stem, ["A: " + t for t in texts], layout="commonsense_qa")
            torch.testing.assert_close(batched, one_by_one, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(batched, expected[index], rtol=1e-5, atol=1e-5)
    assert json.loads((data / "valid.jsonl").read_text().splitlines()[0])["answerKey"] in "ABCDE"
