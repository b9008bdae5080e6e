"""Multiple choice (RACE, SWAG, CommonsenseQA): the ``roberta_ext_multiple_choice`` task and
criterion, and the ``roberta_ext_commonsense_qa`` task.

One classification head with a single output (``sentence_classification_head``,
``num_classes=1``) scores each of the N candidate inputs of an example; the loss is the
cross-entropy of the softmax over the N scores. These are fairseq's ``sentence_ranking`` task
and criterion (``examples/roberta/README.race.md``) and the ``commonsense_qa`` task of
fairseq's examples user-dir (``examples/roberta/commonsense_qa``) under the plugin's names, with
the same options and defaults, so fairseq's tutorial commands run with only ``--task``,
``--criterion``, ``--arch`` and ``--user-dir`` swapped.

**roberta_ext_multiple_choice** reads fairseq's ``sentence_ranking`` layout, which
``roberta-ext prepare-multiple-choice`` writes (see :mod:`roberta_ext.corpus.multiple_choice`)::

    DATA/input0/dict.txt, {split}.bin/.idx    the context of each example (RACE: the article)
    DATA/input1/ ... DATA/inputN/              choice 1..N (RACE: the question with the option)
    DATA/label/{split}.label                   the right choice, 0..N-1, one per line (text)

and builds each candidate as fairseq does: ``--init-token`` before the *choice*, the choice cut
to ``--max-option-length`` tokens, ``--separator-token`` before the context, the whole cut to
``--max-positions`` with ``--shorten-method truncate``. With ``--init-token 0
--separator-token 2`` that is ``<s> choice </s> </s> context </s>``: the choice comes first
(so that a long context, not the choice, is what truncation cuts).

**roberta_ext_commonsense_qa** reads CommonsenseQA's JSONL (``DATA/{split}.jsonl`` and
``DATA/dict.txt``) and encodes with ``--bpe`` at load time, as fairseq's example task does:
``<s> Q: question </s> A: choice </s>`` (``--init-token 0``; the question first, one ``</s>``
between), which is what fairseq's evaluation snippet ``roberta.encode('Q: ' + stem, 'A: ' +
text, no_separator=True)`` builds.

What the plugin adds to fairseq's: ``mask_idx`` for the hub; errors that name the file and the
line for a missing column, a label out of range, bad JSON or a wrong number of choices (fairseq
fails on an ``assert`` or trains on misaligned data); one forward pass over the N candidates of
a batch instead of N; every example in the batches (fairseq 0.12 drops a last batch that is
not a multiple of ``--required-batch-size-multiple``, fairseq#5036, so the tutorial's
``fairseq-validate --batch-size 1`` misses the last test example); the predictions file of
``--save-predictions`` flushed after each batch.
"""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import json
import logging
import os
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from fairseq.criterions import register_criterion
from fairseq.criterions.sentence_ranking import SentenceRankingCriterion
from fairseq.data import (
    Dictionary,
    IdDataset,
    ListDataset,
    NestedDictionaryDataset,
    NumelDataset,
    NumSamplesDataset,
    RawLabelDataset,
    RightPadDataset,
    SortDataset,
    data_utils,
    encoders,
)
from fairseq.tasks import LegacyFairseqTask, register_task
from fairseq.tasks.sentence_ranking import SentenceRankingTask

from ..errors import RobertaExtError
from .datasets import EveryExampleDataset
from .dictionaries import load_dictionary

logger = logging.getLogger(__name__)

TASK = "roberta_ext_multiple_choice"
CQA_TASK = "roberta_ext_commonsense_qa"
CRITERION = "roberta_ext_multiple_choice"
CRITERIA = (CRITERION, "sentence_ranking")
"""Criteria that read the batches of these tasks: ours, and fairseq's own."""


class MultipleChoiceDataError(RobertaExtError, ValueError):
    """Multiple-choice data that cannot be read: the message names the file and the line. A
    ``ValueError`` too, as it always was."""


def _check_criterion(args: Any, task: str) -> None:
    criterion = getattr(args, "criterion", None)
    if criterion not in CRITERIA:
        raise ValueError(
            f"--task {task} needs --criterion {CRITERION} (or fairseq's sentence_ranking), not {criterion}"
        )


def _check_num_classes(args: Any) -> int:
    num_classes = getattr(args, "num_classes", None)
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"--num-classes N (the number of choices per example) is required, got {num_classes}")
    return num_classes


def read_labels(path: str, num_classes: int) -> list[int]:
    """The labels of a ``label/{split}.label`` file: one integer in ``0..num_classes-1`` per
    line, as fairseq's ``sentence_ranking`` reads them; errors name the file and line.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "valid.label")
    >>> _ = open(path, "w").write("0\\n3\\n")
    >>> read_labels(path, 4)
    [0, 3]
    """
    labels = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            try:
                label = int(line.strip())
            except ValueError:
                raise MultipleChoiceDataError(
                    f"{path}:{number}: expected the index of the right choice, got {line.strip()!r}"
                ) from None
            if not 0 <= label < num_classes:
                raise MultipleChoiceDataError(
                    f"{path}:{number}: label {label} is out of range for --num-classes {num_classes} "
                    f"(0..{num_classes - 1})"
                )
            labels.append(label)
    return labels


@register_task(TASK)
class RobertaExtMultipleChoiceTask(SentenceRankingTask):
    """fairseq's ``sentence_ranking`` (its options, defaults, batches and order), checked, with
    the ``<mask>`` index that hubs read. See the module docstring for the layout."""

    def __init__(self, args: Any, dictionary: Dictionary) -> None:
        super().__init__(args, dictionary)
        self.mask_idx = dictionary.index("<mask>")  # load_dictionary appended it, as pretraining did

    @classmethod
    def setup_task(cls, args: Any, **kwargs: Any) -> "RobertaExtMultipleChoiceTask":
        _check_criterion(args, TASK)
        _check_num_classes(args)
        needs = f"input0/ ... input{args.num_classes}/ and label/, as roberta-ext prepare-multiple-choice writes them"
        dictionary = load_dictionary(os.path.join(args.data, "input0", "dict.txt"), task=cls, needs=needs, mask=True)
        logger.info(f"[input] dictionary: {len(dictionary)} types")
        return cls(args, dictionary)

    def load_dataset(self, split: str, combine: bool = False, **kwargs: Any) -> Any:
        num_classes = _check_num_classes(self.args)
        extra = os.path.join(self.args.data, f"input{num_classes + 1}")
        if os.path.isdir(extra):
            raise MultipleChoiceDataError(
                f"{extra} exists: the data has more than --num-classes {num_classes} choices per example"
            )
        # Every column must be there and hold the same examples: fairseq fails on a None or an
        # assert without saying which, or (the labels) trains on misaligned rows.
        lengths = {}
        for column in range(num_classes + 1):
            prefix = os.path.join(self.args.data, f"input{column}", split)
            dataset = data_utils.load_indexed_dataset(
                prefix, self.source_dictionary, getattr(self.args, "dataset_impl", None), combine=combine
            )
            if dataset is None:
                raise FileNotFoundError(
                    f"dataset not found: {prefix}.bin/.idx (input0/ is the context, input1/ ... "
                    f"input{num_classes}/ the {num_classes} choices of --num-classes)"
                )
            lengths[f"input{column}"] = len(dataset)
        label_path = os.path.join(self.args.data, "label", f"{split}.label")
        if os.path.exists(label_path):
            lengths["label"] = len(read_labels(label_path, num_classes))
        if len(set(lengths.values())) > 1:
            found = ", ".join(f"{name} {n}" for name, n in lengths.items())
            raise MultipleChoiceDataError(f"{self.args.data}: the columns of {split} differ in length ({found})")
        super().load_dataset(split, combine=combine, **kwargs)
        self.datasets[split] = EveryExampleDataset(self.datasets[split])
        return self.datasets[split]


# --------------------------------------------------------------------- CommonsenseQA JSONL


def _binarize(task: Any, text: str) -> torch.Tensor:
    if task.bpe is not None:
        text = task.bpe.encode(text)
    return task.dictionary.encode_line(text, append_eos=True, add_if_not_exist=False).long()


@register_task(CQA_TASK)
class RobertaExtCommonsenseQATask(LegacyFairseqTask):
    """fairseq's ``commonsense_qa`` example task: ``DATA/{split}.jsonl`` encoded at load time
    with ``--bpe``, each candidate ``<s> Q: question </s> A: choice </s>``."""

    @staticmethod
    def add_args(parser: Any) -> None:
        parser.add_argument("data", metavar="DIR", help="path to data directory; we load <split>.jsonl")
        parser.add_argument(
            "--init-token", type=int, default=None, help="add token at the beginning of each batch item"
        )
        parser.add_argument("--num-classes", type=int, default=5)

    def __init__(self, args: Any, dictionary: Dictionary) -> None:
        super().__init__(args)
        self.dictionary = dictionary
        self.mask_idx = dictionary.add_symbol("<mask>")
        self.bpe = encoders.build_bpe(args)

    @classmethod
    def setup_task(cls, args: Any, **kwargs: Any) -> "RobertaExtCommonsenseQATask":
        _check_criterion(args, CQA_TASK)
        _check_num_classes(args)
        needs = "dict.txt and {train,valid,test}.jsonl"
        dictionary = load_dictionary(os.path.join(args.data, "dict.txt"), task=cls, needs=needs)
        logger.info(f"dictionary: {len(dictionary)} types")
        return cls(args, dictionary)

    @property
    def source_dictionary(self) -> Dictionary:
        return self.dictionary

    @property
    def target_dictionary(self) -> Dictionary:
        return self.dictionary

    def max_positions(self) -> int | None:
        # fairseq's task has none (an over-long question crashes the model); the model's is the limit.
        return getattr(self.args, "max_positions", None)

    def read_examples(self, path: str) -> tuple[list[list[torch.Tensor]], list[int]]:
        """The candidates of each example of a CommonsenseQA JSONL file (one list of N token
        tensors per example) and the labels (empty when the file has no ``answerKey``)."""
        num_classes = self.args.num_classes
        examples: list[list[torch.Tensor]] = []
        labels: list[int] = []
        has_keys: bool | None = None
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                where = f"{path}:{number}"
                try:
                    example = json.loads(line.strip())
                    stem = example["question"]["stem"]
                    choices = [choice["text"] for choice in example["question"]["choices"]]
                except (ValueError, KeyError, TypeError) as error:
                    problem = f"missing field {error}" if isinstance(error, KeyError) else str(error)
                    raise MultipleChoiceDataError(f"{where}: not a CommonsenseQA example ({problem})") from None
                if len(choices) != num_classes:
                    raise MultipleChoiceDataError(
                        f"{where}: {len(choices)} choices, but --num-classes is {num_classes}"
                    )
                if has_keys is None:
                    has_keys = "answerKey" in example
                if ("answerKey" in example) != has_keys:
                    raise MultipleChoiceDataError(f"{where}: some examples of the file have an answerKey, others not")
                if "answerKey" in example:
                    key = example["answerKey"]
                    label = ord(key) - ord("A") if isinstance(key, str) and len(key) == 1 else -1
                    if not 0 <= label < num_classes:
                        raise MultipleChoiceDataError(
                            f"{where}: answerKey {key!r} is not one of the letters of {num_classes} choices"
                        )
                    labels.append(label)
                # format: `<s> Q: Where would I not want a fox? </s> A: hen house </s>`
                question = _binarize(self, "Q: " + stem)
                if self.args.init_token is not None:
                    question = torch.cat([question.new([self.args.init_token]), question])
                examples.append([torch.cat([question, _binarize(self, "A: " + text)]) for text in choices])
        return examples, labels

    def load_dataset(
        self, split: str, epoch: int = 1, combine: bool = False, data_path: str | None = None, **kwargs: Any
    ) -> Any:
        path = data_path or os.path.join(self.args.data, split + ".jsonl")
        if not os.path.exists(path):
            raise FileNotFoundError(f"Cannot find data: {path}")
        examples, labels = self.read_examples(path)
        dataset: dict[str, Any] = {"id": IdDataset(), "nsentences": NumSamplesDataset()}
        columns = []
        for i in range(self.args.num_classes):
            tokens = [example[i] for example in examples]
            sizes = np.array([len(t) for t in tokens])
            column = ListDataset(tokens, sizes)
            columns.append(column)
            dataset[f"net_input{i + 1}"] = {
                "src_tokens": RightPadDataset(column, pad_idx=self.dictionary.pad()),
                "src_lengths": ListDataset(sizes),
            }
        dataset["ntokens"] = NumelDataset(columns[0], reduce=True)
        if labels:
            dataset["target"] = RawLabelDataset(labels)
        nested = NestedDictionaryDataset(dataset, sizes=[np.maximum.reduce([c.sizes for c in columns])])
        with data_utils.numpy_seed(self.args.seed):
            shuffled = SortDataset(nested, sort_order=[np.random.permutation(len(nested))])
        self.datasets[split] = EveryExampleDataset(shuffled)
        logger.info(f"loaded {split} with {len(nested)} examples from {path}")
        return self.datasets[split]

    def build_model(self, args: Any, from_checkpoint: bool = False) -> Any:
        from fairseq import models

        model = models.build_model(args, self, from_checkpoint)
        model.register_classification_head("sentence_classification_head", num_classes=1)
        return model


# ------------------------------------------------------------------------------ criterion


@register_criterion(CRITERION)
class RobertaExtMultipleChoiceCriterion(SentenceRankingCriterion):
    """fairseq's ``sentence_ranking`` criterion: cross-entropy of the softmax over the N scores,
    ``accuracy`` (% of examples whose best-scored choice is the right one) in the log, and
    ``--save-predictions FILE`` (``id<TAB>prediction[<TAB>label]`` per example). The N
    candidates of a batch go through the model in one pass."""

    def forward(self, model: Any, sample: dict[str, Any], reduce: bool = True):
        if self.ranking_head_name not in getattr(model, "classification_heads", {}):
            raise KeyError(
                f"the model has no classification head {self.ranking_head_name!r} "
                f"(heads: {sorted(getattr(model, 'classification_heads', {}))}); check --ranking-head-name"
            )
        inputs = [sample[f"net_input{i + 1}"]["src_tokens"] for i in range(self.num_classes)]  # N x (B, T_i)
        batch, width = inputs[0].size(0), max(t.size(1) for t in inputs)
        pad = self.task.source_dictionary.pad()
        tokens = torch.cat([F.pad(t, (0, width - t.size(1)), value=pad) for t in inputs])  # (N * B, T)
        scores, _ = model(tokens, classification_head_name=self.ranking_head_name)  # (N * B, 1)
        logits = scores.view(self.num_classes, batch).t()  # (B, N): choice i of example b at [b, i]
        sample_size = batch
        targets = None
        if "target" in sample:
            targets = model.get_targets(sample, [logits]).view(-1)
            loss = F.nll_loss(F.log_softmax(logits, dim=-1, dtype=torch.float32), targets, reduction="sum")
        else:
            loss = torch.tensor(0.0, requires_grad=True)
        if self.prediction_h is not None:
            predictions = logits.argmax(dim=1).tolist()
            for i, (index, prediction) in enumerate(zip(sample["id"].tolist(), predictions)):
                row = [index, prediction] + ([int(targets[i])] if targets is not None else [])
                print("\t".join(map(str, row)), file=self.prediction_h)
            self.prediction_h.flush()  # fairseq-validate never closes it: each batch is on disk
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample_size,
            "sample_size": sample_size,
        }
        if targets is not None:
            logging_output["ncorrect"] = (logits.argmax(dim=1) == targets).sum()
        return loss, sample_size, logging_output
