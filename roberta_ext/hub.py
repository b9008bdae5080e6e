"""The hub interface: fairseq's ``RobertaHubInterface``, without fairseq.

:func:`roberta_ext.from_pretrained` (:mod:`roberta_ext.loading`) builds one from fairseq's
arguments; it has fairseq's methods
(``encode``, ``decode``, ``extract_features``, ``predict``, ``register_classification_head``,
``fill_mask``) giving fairseq's results, plus what users of fairseq's hub keep writing by
hand: batches, long texts, label names. Two deliberate differences:

* the model comes back in eval mode (fairseq's stays in train mode, so its features are
  random until the user remembers ``.eval()``);
* ``fill_mask`` pairs every probability with its own token (fairseq's drops special symbols
  from the list of predictions and then pairs the rest with the wrong probabilities).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

import torch
from torch import nn

from .checkpoints.transformers import SEQUENCE_HEAD, TOKEN_HEAD, save_transformers
from .embedding.pooling import SentenceEmbedding
from .inference.alignment import WordFeatures
from .inference.head_outputs import ChoiceLayout, classify, fill_mask, replaced_token_probs, score_choices, tag
from .inference.inputs import ModelInputs, extract_features, extract_features_long
from .modeling import RobertaModel
from .tokenizers.dictionary import Dictionary
from .tokenizers.registry import Tokenizer, write_transformers_tokenizer

MASK = "<mask>"


@dataclass
class HubTask:
    """What fairseq code reads from ``hub.task``: the dictionaries and the mask index."""

    source_dictionary: Dictionary
    label_dictionary: Dictionary | None
    mask_idx: int

    @property
    def target_dictionary(self) -> Dictionary:
        return self.source_dictionary


class RobertaHubInterface(nn.Module):
    """A RoBERTa model with its tokenizer, used like fairseq's hub interface.

    >>> roberta = from_pretrained("roberta.large")           # doctest: +SKIP
    >>> tokens = roberta.encode("Hello world!")                # doctest: +SKIP
    >>> tokens.tolist()                                        # doctest: +SKIP
    [0, 31414, 232, 328, 2]
    >>> roberta.extract_features(tokens).shape                 # doctest: +SKIP
    torch.Size([1, 5, 1024])
    """

    def __init__(
        self,
        model: RobertaModel,
        tokenizer: Tokenizer,
        *,
        label_dictionary: Dictionary | None = None,
        labels: Sequence[str] | None = None,
        cfg: dict[str, Any] | None = None,
        sentence_embedding: SentenceEmbedding | None = None,
        inputs: ModelInputs | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        # Text -> model input (pairs in the family's layout, words, padding, segment ids): the
        # one object the features take beside the model.
        self.inputs = inputs or ModelInputs.for_model(model, tokenizer)
        # How embed() pools: a sentence-transformers folder's own settings, else mean pooling.
        self.sentence_embedding = sentence_embedding or SentenceEmbedding()
        self.tokenizer = tokenizer
        self.bpe = getattr(tokenizer, "bpe", None)
        self.dictionary = tokenizer.dictionary
        self.cfg = cfg or {}
        # RoBERTa writes "<mask>"; BERT and ALBERT vocabularies call it "[MASK]". A BERT trained
        # with the plugin has both: "[MASK]" in its WordPiece vocabulary and the "<mask>" that
        # fairseq's tasks append to dict.txt, which is the one it was trained to fill.
        self.mask_token = MASK if MASK in self.dictionary else getattr(tokenizer, "mask_token", MASK)
        self.mask_spellings: tuple[str, ...] = tuple(
            dict.fromkeys((self.mask_token, MASK, getattr(tokenizer, "mask_token", MASK)))
        )
        self.task = HubTask(self.dictionary, label_dictionary, self.dictionary.index(self.mask_token))
        if labels is None and label_dictionary is not None:
            labels = label_dictionary.symbols[label_dictionary.nspecial :]
        self.labels: list[str] | None = None if labels is None else list(labels)
        if len(self.dictionary) != model.cfg.vocab_size:
            raise ValueError(
                f"dictionary has {len(self.dictionary)} symbols but the model's embedding has "
                f"{model.cfg.vocab_size} rows"
            )

    @property
    def args(self) -> dict[str, Any]:
        """The checkpoint's model options (fairseq's ``hub.args``)."""
        return self.cfg.get("model", {})

    @property
    def device(self) -> torch.device:
        """Where the model's weights are."""
        return self.model.device

    def max_positions(self) -> int:
        """Longest token sequence the model accepts, ``<s>`` and ``</s>`` included."""
        return self.model.max_positions()

    # ----------------------------------------------------------------------------- text
    def encode(self, sentence: str, *addl_sentences: str, no_separator: bool | None = None) -> torch.Tensor:
        """Text to a 1-D tensor of dictionary indices: ``<s> a </s>``, and for pairs
        ``<s> a </s> </s> b </s>`` (RoBERTa's separator is a doubled ``</s>``; with
        ``no_separator=True`` it is a single one). BERT and ALBERT give ``[CLS] a [SEP] b [SEP]``;
        their segment ids (0 up to the first ``[SEP]``, 1 after) come from :meth:`segments`, and
        ``extract_features``/``predict`` compute them on their own.

        >>> roberta.encode("Hello world!").tolist()                       # doctest: +SKIP
        [0, 31414, 232, 328, 2]
        >>> roberta.encode("Hello", "world").tolist()                     # doctest: +SKIP
        [0, 31414, 2, 2, 8331, 2]
        """
        # A typed buffer viewed as a tensor: half the cost of torch.tensor(list) per sentence.
        return torch.frombuffer(
            array("q", self.inputs.encode(sentence, *addl_sentences, no_separator=no_separator)), dtype=torch.long
        )

    def decode(self, tokens: torch.Tensor) -> str | list[str]:
        """Indices back to text. Sentences separated by ``</s> </s>`` come back as a list.

        >>> roberta.decode(roberta.encode("Hello world!"))                # doctest: +SKIP
        'Hello world!'
        """
        if tokens.dim() != 1:
            raise ValueError(f"decode takes a 1-D tensor of indices, got shape {tuple(tokens.shape)}")
        return self.inputs.decode(tokens.tolist())

    def encode_batch(
        self, sentences: Sequence[str | Sequence[str]], *, no_separator: bool | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode many texts (or tuples of texts, for pairs) into one right-padded batch.

        Returns ``(tokens (B, T), lengths (B,))``; padding is ``<pad>``, which the model ignores.

        >>> tokens, lengths = roberta.encode_batch(["Hello world!", "Hi"])   # doctest: +SKIP
        >>> tokens.shape, lengths.tolist()                                    # doctest: +SKIP
        (torch.Size([2, 5]), [5, 3])
        """
        rows = [
            self.inputs.encode(*((s,) if isinstance(s, str) else tuple(s)), no_separator=no_separator)
            for s in sentences
        ]
        return self.inputs.collate(rows)

    def collate(self, rows: Sequence[Sequence[int] | torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Pad lists (or 1-D tensors) of indices into ``(tokens (B, T), lengths (B,))``."""
        return self.inputs.collate(rows)

    def segments(self, tokens: torch.Tensor) -> torch.Tensor:
        """BERT's segment (token-type) ids of encoded text: 0 up to and including the first
        ``[SEP]``, 1 after it; 0 on padding.

        >>> bert.segments(bert.encode("Hello", "world")).tolist()          # doctest: +SKIP
        [0, 0, 0, 1, 1]
        """
        return self.inputs.segments(tokens)

    # ------------------------------------------------------------------------- features
    @overload
    def extract_features(self, tokens: torch.Tensor, return_all_hiddens: Literal[False] = False) -> torch.Tensor: ...
    @overload
    def extract_features(self, tokens: torch.Tensor, return_all_hiddens: Literal[True]) -> list[torch.Tensor]: ...
    @overload
    def extract_features(
        self, tokens: torch.Tensor, return_all_hiddens: bool = False
    ) -> torch.Tensor | list[torch.Tensor]: ...
    def extract_features(
        self, tokens: torch.Tensor, return_all_hiddens: bool = False
    ) -> torch.Tensor | list[torch.Tensor]:
        """Last-layer features ``(B, T, C)``; with ``return_all_hiddens`` a list of
        ``encoder_layers + 1`` tensors, the first being the embeddings (25 for roberta.large).

        Accepts one sentence ``(T,)`` or a padded batch ``(B, T)``; padding rows do not change
        the features of real tokens. Raises ``ValueError`` beyond ``max_positions()`` tokens
        (see :meth:`extract_features_long`).

        >>> roberta.extract_features(roberta.encode("Hello world!")).shape   # doctest: +SKIP
        torch.Size([1, 5, 1024])
        """
        return extract_features(self.model, self.inputs, tokens, return_all_hiddens=return_all_hiddens)

    def extract_features_batch(
        self, sentences: Sequence[str | Sequence[str]], *, return_all_hiddens: bool = False
    ) -> tuple[torch.Tensor | list[torch.Tensor], torch.Tensor]:
        """Features of many texts at once: ``(features (B, T, C), lengths (B,))``. Row ``i`` is
        valid up to ``lengths[i]``; the rest is padding.

        >>> feats, lengths = roberta.extract_features_batch(["Hello world!", "Hi"])  # doctest: +SKIP
        """
        tokens, lengths = self.encode_batch(sentences)
        return self.extract_features(tokens, return_all_hiddens=return_all_hiddens), lengths

    def extract_features_long(self, tokens: torch.Tensor, *, stride: int | None = None) -> torch.Tensor:
        """Features ``(1, T, C)`` of a sequence of any length, by sliding windows.

        Each window holds ``max_positions() - 2`` content tokens between its own ``<s>`` and
        ``</s>``; consecutive windows start ``stride`` tokens apart (default: half a window),
        and each token takes its features from the window in which it sits furthest from an
        edge. A sequence that fits is computed in one pass, identically to ``extract_features``.

        >>> long = roberta.encode("word " * 2000)                            # doctest: +SKIP
        >>> roberta.extract_features_long(long).shape                        # doctest: +SKIP
        torch.Size([1, 2002, 1024])
        """
        return extract_features_long(self.model, self.inputs, tokens, stride=stride)

    # ------------------------------------------------------------ sentence embeddings
    def embed(
        self,
        texts: str | Sequence[str | Sequence[str]],
        *,
        pooling: str | Sequence[str] | None = None,
        normalize: bool | None = None,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        max_length: int | None = None,
        prompt: str | None = None,
        prompt_name: str | None = None,
        truncate_dim: int | None = None,
    ) -> torch.Tensor:
        """Sentence embeddings ``(N, C)`` float32 of N texts, or pairs of texts (tuples), in
        their order, pooled as the model's own settings say (a sentence-transformers folder's:
        the same as ``SentenceTransformer(folder).encode(texts)``; else mean pooling) unless
        ``pooling``/``normalize`` say otherwise; ``truncate_dim`` keeps the first that many values
        (Matryoshka, as sentence-transformers' ``truncate_dim``). Options:
        :func:`roberta_ext.embedding.embed`.

        >>> roberta.embed(["Hello world!", "Hi"], normalize=True).shape        # doctest: +SKIP
        torch.Size([2, 768])
        >>> roberta.embed(["Hello world!"], truncate_dim=256).shape             # doctest: +SKIP
        torch.Size([1, 256])
        """
        from .embedding.embedder import embed

        return embed(
            self.model,
            self.inputs,
            self.sentence_embedding,
            texts,
            pooling=pooling,
            normalize=normalize,
            batch_size=batch_size,
            max_tokens=max_tokens,
            max_length=max_length,
            prompt=prompt,
            prompt_name=prompt_name,
            truncate_dim=truncate_dim,
        )

    def similarity(self, a: torch.Tensor | str | Sequence[str], b: torch.Tensor | str | Sequence[str]) -> torch.Tensor:
        """Scores ``(N, M)`` between N and M embeddings (or texts, embedded first with
        :meth:`embed`'s defaults): cosine similarity, or what a sentence-transformers folder's
        ``similarity_fn_name`` names (``dot``; ``euclidean`` and ``manhattan`` negated).

        >>> roberta.similarity(["A cat sat."], ["A cat sits.", "Stocks fell."])  # doctest: +SKIP
        tensor([[0.97, 0.41]])
        """
        from .embedding.pooling import similarity

        left, right = (x if isinstance(x, torch.Tensor) else self.embed(x) for x in (a, b))
        return similarity(left, right, self.sentence_embedding.similarity)

    def extract_features_aligned_to_words(self, sentence: str, return_all_hiddens: bool = False) -> WordFeatures:
        """Features of the words of ``sentence`` instead of its sub-word tokens (fairseq's method,
        without spaCy): a :class:`~roberta_ext.inference.alignment.WordFeatures` whose ``words`` are
        ``<s>``, the words, ``</s>`` and whose ``features`` ``(W + 2, C)`` (a list of them, one per
        layer, with ``return_all_hiddens``) hold in row ``i`` the sum of ``words[i]``'s token
        features, a token shared by ``k`` words counting ``1/k`` in each — fairseq's rows, where
        fairseq's alignment works. Words are split at whitespace and around every punctuation
        mark, symbol and emoji; any text aligns, curly quotes, emoji, combining marks and
        unknown tokens included (see :mod:`roberta_ext.inference.alignment`).

        >>> aligned = roberta.extract_features_aligned_to_words("“Hello” world!")      # doctest: +SKIP
        >>> aligned.words, aligned.features.shape                                       # doctest: +SKIP
        (['<s>', '“', 'Hello', '”', 'world', '!', '</s>'], torch.Size([7, 1024]))
        """
        from .inference.alignment import extract_features_aligned_to_words

        return extract_features_aligned_to_words(
            self.model, self.inputs, sentence, return_all_hiddens=return_all_hiddens
        )

    # ---------------------------------------------------------------- classification
    def register_classification_head(
        self, name: str, num_classes: int | None = None, embedding_size: int | None = None, **kwargs: Any
    ) -> None:
        """Add a new, randomly initialised classification head (fairseq's signature;
        ``embedding_size`` is accepted and unused, as in fairseq's RoBERTa)."""
        self.model.register_classification_head(name, num_classes=num_classes, inner_dim=kwargs.get("inner_dim"))

    def predict(self, head: str, tokens: torch.Tensor, return_logits: bool = False) -> torch.Tensor:
        """Log-probabilities ``(B, num_classes)`` (or logits) of the head called ``head``.

        >>> roberta.predict("mnli", roberta.encode("A man sleeps.", "A man is awake.")).argmax()  # doctest: +SKIP
        tensor(0)
        """
        return classify(self.model, self.inputs, head, tokens, return_logits=return_logits)

    def label_name(self, class_index: int) -> str:
        """The label of class ``class_index``, read from the fine-tuning data's ``label/dict.txt``
        (or a transformers checkpoint's ``id2label``).

        >>> roberta.label_name(roberta.predict("sentiment", tokens).argmax().item())  # doctest: +SKIP
        'positive'
        """
        if self.labels is None:
            raise ValueError("no label names: load with data_name_or_path pointing at a folder with label/dict.txt")
        if not 0 <= class_index < len(self.labels):
            raise IndexError(f"class index {class_index} is out of range for {len(self.labels)} labels")
        return self.labels[class_index]

    def predict_label(self, head: str, tokens: torch.Tensor) -> list[str]:
        """The most likely label name for each row of ``tokens``."""
        return [self.label_name(i) for i in self.predict(head, tokens).argmax(dim=-1).tolist()]

    # ------------------------------------------------------------------- multiple choice
    def score_choices(
        self,
        context: str,
        choices: Sequence[str],
        head: str = "sentence_classification_head",
        *,
        layout: ChoiceLayout = "multiple_choice",
        max_choice_length: int | None = None,
        truncate: bool = False,
    ) -> torch.Tensor:
        """The logits ``(N,)`` of the one-output head ``head`` for each of the N ``choices``, each
        encoded as the multiple-choice fine-tuning task built it (``layout``:
        ``"multiple_choice"``, fairseq's ``sentence_ranking`` for RACE and SWAG, or
        ``"commonsense_qa"``), in one batched pass; see :func:`roberta_ext.inference.head_outputs.score_choices`.

        >>> roberta.score_choices("The sun is hot.", ["Is it hot? yes", "Is it hot? no"])  # doctest: +SKIP
        tensor([ 2.1034, -1.8870])
        >>> roberta.score_choices("Q: Where do fish live?", ["A: water", "A: trees"],
        ...                       layout="commonsense_qa").argmax().item()  # doctest: +SKIP
        0
        """
        return score_choices(
            self.model,
            self.inputs,
            context,
            choices,
            head,
            layout=layout,
            max_choice_length=max_choice_length,
            truncate=truncate,
        )

    # ------------------------------------------------------------------- question answering
    def answer(self, question: str, context: str, **kwargs: Any) -> Any:
        """The answer to ``question`` in ``context`` from the start/end token head ``qa``:
        an :class:`~roberta_ext.inference.qa.Answer` with the text, its character offsets in
        ``context`` and a score; falsy (empty text) when the no-answer score wins. Long
        contexts are read in windows. Keywords: see :func:`roberta_ext.inference.qa.answer`.

        >>> roberta.answer("What is the capital of Zorbia?", "The capital of Zorbia is Quelm.")  # doctest: +SKIP
        Answer(text='Quelm.', start=25, end=31, score=9.1, null_score=-3.2)
        """
        from .inference.qa import answer

        return answer(self, question, context, **kwargs)

    # ------------------------------------------------------------------------- ELECTRA
    def replaced_token_probs(self, text: str | torch.Tensor) -> list[tuple[str, float]]:
        """ELECTRA's "real or fake": for each token of ``text`` (a string, or encoded tokens),
        the discriminator's probability that it was replaced, as ``(token text, probability)``
        without ``<s>``/``</s>``. Needs a model with a discriminator head (an ELECTRA
        pretraining checkpoint or transformers' ``ElectraForPreTraining``).

        >>> electra.replaced_token_probs("the chef ate the meal")         # doctest: +SKIP
        [(' the', 0.01), (' chef', 0.02), (' ate', 0.91), (' the', 0.01), (' meal', 0.03)]
        """
        tokens = self.encode(text) if isinstance(text, str) else text
        return replaced_token_probs(self.model, self.inputs, tokens)

    # ---------------------------------------------------------------------- exporting
    def save_transformers(self, directory: str | os.PathLike[str], *, architecture: str | None = None) -> Path:
        """Write model and tokenizer as a transformers directory, loadable by transformers'
        ``AutoModelFor...``/``AutoTokenizer.from_pretrained(directory)`` and by
        :func:`~roberta_ext.from_pretrained`; ids and features stay equal. The directory appears
        whole or not at all. (See :func:`roberta_ext.checkpoints.transformers.save_transformers`
        for the architecture chosen.)

        >>> roberta.save_transformers("roberta-hf")                           # doctest: +SKIP
        """
        labels = (
            self.labels
            if (SEQUENCE_HEAD in self.model.classification_heads or TOKEN_HEAD in self.model.token_heads)
            else None
        )
        return save_transformers(
            self.model,
            directory,
            architecture=architecture,
            labels=labels,
            extra_files=lambda directory: write_transformers_tokenizer(
                self.tokenizer, directory, max_positions=self.max_positions(), mask_token=self.mask_token
            ),
            special_ids={  # a sequence starts with bos (<s>, [CLS]) and ends with eos (</s>, [SEP])
                "bos_token_id": self.dictionary.bos(),
                "eos_token_id": self.dictionary.eos(),
                "cls_token_id": self.dictionary.bos(),
                "sep_token_id": self.dictionary.eos(),
            },
        )

    def export_onnx(
        self,
        path: str | os.PathLike[str],
        *,
        head: str | None = None,
        pooling: str | Sequence[str] | None = None,
        normalize: bool | None = None,
        attention_mask: bool = True,
        opset: int | None = None,
    ) -> Path:
        """Write the model as an ONNX file for onnxruntime: ``input_ids`` and ``attention_mask``
        (int64, any batch and length) -> ``features``, the ``logits`` of the head ``head``, or
        ``embeddings`` pooled as :meth:`embed` pools (``pooling``: ``"mean"``, ``"cls"``, ...,
        or ``"model"``, this model's own; ``normalize``). The file is checked against this hub
        before it is written. See :func:`roberta_ext.export.to_onnx` and docs/export.md.

        >>> roberta.export_onnx("model.onnx", pooling="mean")                # doctest: +SKIP
        PosixPath('model.onnx')
        """
        from .export import to_onnx

        return to_onnx(
            self, path, head=head, pooling=pooling, normalize=normalize, attention_mask=attention_mask, opset=opset
        )

    def export_torch(
        self,
        path: str | os.PathLike[str],
        *,
        head: str | None = None,
        pooling: str | Sequence[str] | None = None,
        normalize: bool | None = None,
        attention_mask: bool = True,
    ) -> Path:
        """Write the model as a ``torch.export`` program (``.pt2``), with the inputs and outputs of
        :meth:`export_onnx`; ``torch.export.load(path).module()(input_ids, attention_mask)`` runs
        it. See :func:`roberta_ext.export.to_torch_export`.

        >>> roberta.export_torch("model.pt2")                               # doctest: +SKIP
        PosixPath('model.pt2')
        """
        from .export import to_torch_export

        return to_torch_export(
            self, path, head=head, pooling=pooling, normalize=normalize, attention_mask=attention_mask
        )

    # ------------------------------------------------------------------- token tagging
    def tag(self, sentence: str, head: str = "tagger") -> list[tuple[str, str, float]]:
        """Label every word of ``sentence`` with the token head ``head`` (named-entity tagging
        and the like): ``[(word, label, probability), ...]``. Words are split on whitespace and
        each is labelled by its first sub-word, as the tagging fine-tuning task trains it.

        >>> roberta.tag("Ada Lovelace was born in London")                 # doctest: +SKIP
        [('Ada', 'B-PER', 0.98), ('Lovelace', 'I-PER', 0.97), ('was', 'O', 0.99), ...]
        """
        return tag(self.model, self.inputs, self.labels, sentence, head)

    # --------------------------------------------------------------------- fill-mask
    def fill_mask(self, masked_input: str, topk: int = 5) -> list[tuple[str, float, str]]:
        """The ``topk`` fillings of the single ``<mask>`` in ``masked_input``, as
        ``(filled sentence, probability, token)``, most probable first. BERT and ALBERT models
        take ``[MASK]`` as well.

        >>> roberta.fill_mask("The first Star wars movie came out in <mask>", topk=1)  # doctest: +SKIP
        [('The first Star wars movie came out in 1977', 0.9504708051681519, ' 1977')]
        """
        return fill_mask(
            self.model, self.inputs, masked_input, mask=self.mask_token, topk=topk, spellings=self.mask_spellings
        )

    def _token_text(self, index: int) -> str:
        """The text of one dictionary entry: a token decoded, a special symbol as itself."""
        return self.tokenizer.token_text(index)
