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

import json
import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Literal, overload

import torch
import torch.nn.functional as F
from torch import nn

from .alignment import WordFeatures
from .checkpoints.transformers import SEQUENCE_HEAD, TOKEN_HEAD, save_transformers
from .embedding.pooling import SentenceEmbedding
from .families import get_family
from .modeling import RobertaModel
from .tokenizers.dictionary import Dictionary
from .tokenizers.registry import Tokenizer, kind_of

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
    ) -> None:
        super().__init__()
        self.model = model
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
        # RoBERTa separates a pair with "</s> </s>"; BERT's family with one [SEP] and segment ids.
        self.double_separator = get_family(model.cfg.family).double_separator
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
        return self.model.encoder.sentence_encoder.embed_tokens.weight.device

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
            array("q", self._encode_ids(sentence, *addl_sentences, no_separator=no_separator)), dtype=torch.long
        )

    def _encode_ids(self, sentence: str, *addl_sentences: str, no_separator: bool | None = None) -> list[int]:
        if no_separator is None:
            no_separator = not self.double_separator
        bos, eos = self.dictionary.bos(), self.dictionary.eos()
        ids = [bos, *self.tokenizer.encode(sentence), eos]
        for extra in addl_sentences:
            if not no_separator:
                ids.append(eos)
            ids.extend(self.tokenizer.encode(extra))
            ids.append(eos)
        return ids

    def decode(self, tokens: torch.Tensor) -> str | list[str]:
        """Indices back to text. Sentences separated by ``</s> </s>`` come back as a list.

        >>> roberta.decode(roberta.encode("Hello world!"))                # doctest: +SKIP
        'Hello world!'
        """
        if tokens.dim() != 1:
            raise ValueError(f"decode takes a 1-D tensor of indices, got shape {tuple(tokens.shape)}")
        ids = tokens.tolist()
        if ids and ids[0] == self.dictionary.bos():
            ids = ids[1:]
        eos = self.dictionary.eos()
        # A document break is two </s> in a row; the second starts the next sentence.
        sentences, start = [], 0
        for i in range(len(ids) - 1):
            if ids[i] == eos and ids[i + 1] == eos:
                sentences.append(ids[start : i + 1])
                start = i + 1
        sentences.append(ids[start:])
        texts = [self.tokenizer.decode(s) for s in sentences]
        return texts[0] if len(texts) == 1 else texts

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
            self._encode_ids(*((s,) if isinstance(s, str) else tuple(s)), no_separator=no_separator) for s in sentences
        ]
        return self.collate(rows)

    def collate(self, rows: Sequence[Sequence[int] | torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Pad lists (or 1-D tensors) of indices into ``(tokens (B, T), lengths (B,))``."""
        if not rows:
            raise ValueError("cannot build a batch from no sentences")
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
        tokens = torch.full((len(rows), int(lengths.max())), self.dictionary.pad(), dtype=torch.long)
        # One masked assignment of all rows back to back (row-major order) instead of one per row.
        flat = array("q", chain.from_iterable(r.tolist() if isinstance(r, torch.Tensor) else r for r in rows))
        if flat:
            tokens[torch.arange(tokens.size(1)) < lengths[:, None]] = torch.frombuffer(flat, dtype=torch.long)
        return tokens, lengths

    def segments(self, tokens: torch.Tensor) -> torch.Tensor:
        """BERT's segment (token-type) ids of encoded text: 0 up to and including the first
        ``[SEP]``, 1 after it; 0 on padding.

        >>> bert.segments(bert.encode("Hello", "world")).tolist()          # doctest: +SKIP
        [0, 0, 0, 1, 1]
        """
        is_sep = tokens.eq(self.dictionary.eos()).long()
        before = torch.cumsum(is_sep, dim=-1) - is_sep  # separators strictly before each position
        return (before.gt(0) & tokens.ne(self.dictionary.pad())).long()

    def _segment_labels(self, tokens: torch.Tensor) -> torch.Tensor | None:
        return self.segments(tokens) if self.model.cfg.type_vocab_size >= 2 else None

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
        if tokens.dim() == 1:
            tokens = tokens.unsqueeze(0)
        if tokens.size(-1) > self.max_positions():
            raise ValueError(f"tokens exceeds maximum length: {tokens.size(-1)} > {self.max_positions()}")
        tokens = tokens.to(device=self.device)
        features, extra = self.model(
            tokens,
            features_only=True,
            return_all_hiddens=return_all_hiddens,
            segment_labels=self._segment_labels(tokens),
        )
        return extra["inner_states"] if return_all_hiddens else features

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
        if tokens.dim() == 2 and tokens.size(0) == 1:
            tokens = tokens[0]
        if tokens.dim() != 1:
            raise ValueError(f"extract_features_long takes one sequence (T,), got shape {tuple(tokens.shape)}")
        limit = self.max_positions()
        if tokens.numel() <= limit:
            return self.extract_features(tokens)
        bos, eos = self.dictionary.bos(), self.dictionary.eos()
        has_bos, has_eos = int(tokens[0]) == bos, int(tokens[-1]) == eos
        content = tokens[int(has_bos) : tokens.numel() - int(has_eos)]
        window = limit - 2
        stride = stride or window // 2
        if not 0 < stride <= window:
            raise ValueError(f"stride must be in 1..{window}, got {stride}")
        starts = list(range(0, max(content.numel() - window, 0) + 1, stride))
        if starts[-1] + window < content.numel():
            starts.append(content.numel() - window)
        rows = [
            torch.cat([tokens.new_tensor([bos]), content[s : s + window], tokens.new_tensor([eos])]) for s in starts
        ]
        features = self.extract_features(torch.stack(rows))  # (W, window + 2, C)

        out = features.new_empty(content.numel(), features.size(-1))
        best = torch.full((content.numel(),), -1, dtype=torch.long)
        for w, start in enumerate(starts):
            positions = torch.arange(start, start + window)
            distance = torch.minimum(positions - start, start + window - 1 - positions)  # to the window's edge
            take = distance > best[positions]
            out[positions[take]] = features[w, 1:-1][take]
            best[positions[take]] = distance[take]
        pieces = [features[0, :1]] if has_bos else []
        pieces.append(out)
        if has_eos:
            pieces.append(features[-1, -1:])
        return torch.cat(pieces).unsqueeze(0)

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
    ) -> torch.Tensor:
        """Sentence embeddings ``(N, C)`` float32 of N texts, or pairs of texts (tuples), in
        their order (a single string gives ``(1, C)``).

        ``pooling`` is ``"mean"`` (over the real tokens), ``"cls"``, ``"max"``,
        ``"mean_sqrt_len_tokens"``, ``"weightedmean"`` or ``"lasttoken"``, or a list of them
        (concatenated); ``normalize=True`` L2-normalises. Both default to the model's own
        settings: those of a sentence-transformers folder (its ``Pooling`` and ``Normalize``
        modules, ``max_seq_length``, ``do_lower_case``, prompts), giving what
        ``SentenceTransformer(folder).encode(texts)`` gives; for any other model, mean pooling
        without normalisation. Texts longer than ``max_length`` tokens (default: the folder's
        ``max_seq_length``, else ``max_positions()``) are truncated, pairs longest side first.
        ``prompt`` (or ``prompt_name``, one of the folder's prompts) is prepended to each text.

        Rows are sorted by length and batched by a budget of ``max_tokens`` padded tokens per
        batch (and at most ``batch_size`` rows), and the encoder skips what padding is left, so
        the result of a text never depends on its batch-mates, and a mixed-length list costs
        what its real tokens cost. See :mod:`roberta_ext.embedding`.

        >>> roberta.embed(["Hello world!", "Hi"], normalize=True).shape        # doctest: +SKIP
        torch.Size([2, 768])
        """
        from .embedding.embedder import embed

        return embed(
            self,
            texts,
            pooling=pooling,
            normalize=normalize,
            batch_size=batch_size,
            max_tokens=max_tokens,
            max_length=max_length,
            prompt=prompt,
            prompt_name=prompt_name,
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
        without spaCy): a :class:`~roberta_ext.alignment.WordFeatures` whose ``words`` are
        ``<s>``, the words, ``</s>`` and whose ``features`` ``(W + 2, C)`` (a list of them, one per
        layer, with ``return_all_hiddens``) hold in row ``i`` the sum of ``words[i]``'s token
        features, a token shared by ``k`` words counting ``1/k`` in each — fairseq's rows, where
        fairseq's alignment works. Words are split at whitespace and around every punctuation
        mark, symbol and emoji; any text aligns, curly quotes, emoji, combining marks and
        unknown tokens included (see :mod:`roberta_ext.alignment`).

        >>> aligned = roberta.extract_features_aligned_to_words("“Hello” world!")      # doctest: +SKIP
        >>> aligned.words, aligned.features.shape                                       # doctest: +SKIP
        (['<s>', '“', 'Hello', '”', 'world', '!', '</s>'], torch.Size([7, 1024]))
        """
        from .alignment import extract_features_aligned_to_words

        return extract_features_aligned_to_words(self, sentence, return_all_hiddens=return_all_hiddens)

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
        if head not in self.model.classification_heads:
            known = sorted(self.model.classification_heads)
            raise KeyError(f"no classification head named {head!r}; registered heads: {known}")
        features = self.extract_features(tokens.to(device=self.device))
        logits = self.model.classify(head, features)
        return logits if return_logits else F.log_softmax(logits, dim=-1)

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
    @torch.no_grad()
    def score_choices(
        self,
        context: str,
        choices: Sequence[str],
        head: str = "sentence_classification_head",
        *,
        layout: Literal["multiple_choice", "commonsense_qa"] = "multiple_choice",
        max_choice_length: int | None = None,
        truncate: bool = False,
    ) -> torch.Tensor:
        """The logits ``(N,)`` of the one-output head ``head`` for each of the N ``choices``,
        computed in one batched forward pass without gradients (``predict`` keeps them);
        ``.argmax()`` is the predicted choice and ``.softmax(-1)`` the probabilities the
        multiple-choice loss trains.

        Each candidate is encoded as the fine-tuning task built it. ``layout="multiple_choice"``
        (``--task roberta_ext_multiple_choice``, fairseq's ``sentence_ranking``: RACE, SWAG):
        the choice first, then the context, ``<s> choice </s> </s> context </s>`` (the family's
        separator); ``max_choice_length`` is the task's ``--max-option-length`` (``<s>`` and
        ``</s>`` of the choice included) and ``truncate=True`` its ``--shorten-method truncate``
        at ``max_positions()``. ``layout="commonsense_qa"`` (``--task
        roberta_ext_commonsense_qa``): the context first, one ``</s>`` between,
        ``<s> Q: question </s> A: choice </s>`` — the caller writes the ``Q: ``/``A: ``
        prefixes. For that layout the result equals fairseq's CommonsenseQA snippet,
        ``torch.cat([predict(head, encode('Q: ' + stem, 'A: ' + text, no_separator=True),
        return_logits=True) for text in texts])``, one pass instead of N.

        >>> roberta.score_choices("The sun is hot.", ["Is it hot? yes", "Is it hot? no"])  # doctest: +SKIP
        tensor([ 2.1034, -1.8870])
        >>> roberta.score_choices("Q: Where do fish live?", ["A: water", "A: trees"],
        ...                       layout="commonsense_qa").argmax().item()  # doctest: +SKIP
        0
        """
        if head not in self.model.classification_heads:
            known = sorted(self.model.classification_heads)
            raise KeyError(f"no classification head named {head!r}; registered heads: {known}")
        outputs = self.model.classification_heads[head].num_classes
        if outputs != 1:
            raise ValueError(
                f"score_choices needs a head with one output (the multiple-choice tasks register num_classes=1); "
                f"{head!r} has {outputs}"
            )
        if not choices:
            raise ValueError("score_choices needs at least one choice")
        bos, eos = self.dictionary.bos(), self.dictionary.eos()
        context_ids = self.tokenizer.encode(context)
        rows = []
        for choice in choices:
            if layout == "commonsense_qa":
                ids = self._encode_ids(context, choice, no_separator=True)
            elif layout == "multiple_choice":
                # As sentence_ranking: --init-token before the choice, the choice cut to
                # --max-option-length, then --separator-token and the context, which already ends in </s>.
                first = [bos, *self.tokenizer.encode(choice), eos][:max_choice_length]
                separator = [eos] if self.double_separator else []
                ids = first + separator + context_ids + [eos]
            else:
                raise ValueError(f"layout must be 'multiple_choice' or 'commonsense_qa', got {layout!r}")
            if truncate:
                ids = ids[: self.max_positions()]
            rows.append(ids)
        tokens, _ = self.collate(rows)  # (N, T)
        return self.predict(head, tokens, return_logits=True)[:, 0]

    # ------------------------------------------------------------------- question answering
    def answer(self, question: str, context: str, **kwargs: Any) -> Any:
        """The answer to ``question`` in ``context`` from the start/end token head ``qa``:
        an :class:`~roberta_ext.qa.Answer` with the text, its character offsets in
        ``context`` and a score; falsy (empty text) when the no-answer score wins. Long
        contexts are read in windows. Keywords: see :func:`roberta_ext.qa.answer`.

        >>> roberta.answer("What is the capital of Zorbia?", "The capital of Zorbia is Quelm.")  # doctest: +SKIP
        Answer(text='Quelm.', start=25, end=31, score=9.1, null_score=-3.2)
        """
        from .qa import answer

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
        from .families.electra import replaced_token_probs

        tokens = self.encode(text) if isinstance(text, str) else text
        if tokens.dim() != 1:
            raise ValueError(f"replaced_token_probs takes one sentence, got tokens of shape {tuple(tokens.shape)}")
        tokens = tokens.to(self.device)
        with torch.no_grad():
            probs = replaced_token_probs(self.model, tokens[None], self._segment_labels(tokens[None]))[0]
        specials = {self.dictionary.bos(), self.dictionary.eos(), self.dictionary.pad()}
        return [(self._token_text(i), p) for i, p in zip(tokens.tolist(), probs.tolist()) if i not in specials]

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
            self.model, directory, architecture=architecture, labels=labels, extra_files=self._write_tokenizer_files
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

    def _write_tokenizer_files(self, directory: Path) -> None:
        config: dict[str, Any] = {"model_max_length": self.max_positions()}
        kind_of(self.tokenizer).save_transformers(self.tokenizer, directory, config, mask_token=self.mask_token)
        (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    # ------------------------------------------------------------------- token tagging
    def tag(self, sentence: str, head: str = "tagger") -> list[tuple[str, str, float]]:
        """Label every word of ``sentence`` with the token head ``head`` (named-entity tagging
        and the like): ``[(word, label, probability), ...]``. Words are split on whitespace and
        each is labelled by its first sub-word, as the tagging fine-tuning task trains it.

        >>> roberta.tag("Ada Lovelace was born in London")                 # doctest: +SKIP
        [('Ada', 'B-PER', 0.98), ('Lovelace', 'I-PER', 0.97), ('was', 'O', 0.99), ...]
        """
        if head not in self.model.token_heads:
            raise KeyError(f"no token head named {head!r}; registered token heads: {sorted(self.model.token_heads)}")
        words = sentence.split()
        if not words:
            return []
        ids, firsts = [self.dictionary.bos()], []
        for i, word in enumerate(words):
            pieces = self.tokenizer.encode_word(word, first=i == 0)
            firsts.append(len(ids))
            ids.extend(pieces or [self.dictionary.unk()])
        ids.append(self.dictionary.eos())
        if len(ids) > self.max_positions():
            raise ValueError(f"sentence is {len(ids)} tokens long, more than the model's {self.max_positions()}")
        tokens = torch.tensor([ids], device=self.device)
        with torch.no_grad():
            logits, _ = self.model(tokens, token_head_name=head, segment_labels=self._segment_labels(tokens))
        probs, best = logits[0, firsts].float().softmax(dim=-1).max(dim=-1)
        return [(word, self.label_name(k), p) for word, k, p in zip(words, best.tolist(), probs.tolist())]

    # --------------------------------------------------------------------- fill-mask
    def fill_mask(self, masked_input: str, topk: int = 5) -> list[tuple[str, float, str]]:
        """The ``topk`` fillings of the single ``<mask>`` in ``masked_input``, as
        ``(filled sentence, probability, token)``, most probable first. BERT and ALBERT models
        take ``[MASK]`` as well.

        >>> roberta.fill_mask("The first Star wars movie came out in <mask>", topk=1)  # doctest: +SKIP
        [('The first Star wars movie came out in 1977', 0.9504708051681519, ' 1977')]
        """
        if not self.model.has_lm_head:
            raise ValueError(
                "this checkpoint has no masked-LM head (it was saved without one), so it cannot fill masks"
            )
        mask = self.mask_token
        for spelling in self.mask_spellings[1:]:  # "[MASK]" and "<mask>" both mean the mask
            masked_input = masked_input.replace(spelling, mask)
        if masked_input.count(mask) != 1:
            spellings = " or ".join(self.mask_spellings)
            raise ValueError(
                f"fill_mask needs exactly one {spellings} in its input, got {masked_input.count(mask)}: "
                f"{masked_input!r}"
            )
        # Each side is encoded with trailing spaces stripped: the space before <mask> belongs
        # to the predicted token (" 1977"), exactly as fairseq does it.
        left, right = (self.tokenizer.encode(span.rstrip()) for span in masked_input.split(mask))
        ids = [self.dictionary.bos(), *left, self.task.mask_idx, *right, self.dictionary.eos()]
        tokens = torch.tensor([ids], dtype=torch.long)
        if tokens.size(-1) > self.max_positions():
            raise ValueError(f"tokens exceeds maximum length: {tokens.size(-1)} > {self.max_positions()}")
        masked = tokens.eq(self.task.mask_idx).to(self.device)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                logits, _ = self.model(tokens.to(self.device), masked_tokens=masked)  # (1, V)
        finally:
            self.model.train(was_training)
        probs, indices = logits[0].softmax(dim=-1).topk(k=topk)
        results = []
        for prob, index in zip(probs.tolist(), indices.tolist()):
            predicted = self._token_text(index)
            target = f" {mask}" if f" {mask}" in masked_input else mask
            results.append((masked_input.replace(target, predicted), prob, predicted))
        return results

    def _token_text(self, index: int) -> str:
        """The text of one dictionary entry: a token decoded, a special symbol as itself."""
        return self.tokenizer.token_text(index)
