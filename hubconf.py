"""torch.hub entry points for roberta_ext.

>>> import torch
>>> roberta = torch.hub.load(  # doctest: +SKIP
...     "path/to/roberta_ext", "roberta", "/path/to/roberta.large", source="local")

The names with dots (``roberta.base``, ``xlmr.large``, ...) are not Python identifiers, so
torch.hub reaches them through ``getattr``: ``torch.hub.load(repo, "xlmr.large", source="local")``
works, as ``torch.hub.load("pytorch/fairseq", "xlmr.large")`` does for fairseq.
"""

from roberta_ext.hub import RobertaHubInterface
from roberta_ext.loading import from_pretrained as _from_pretrained

dependencies = ["torch", "regex", "requests", "tqdm", "sentencepiece"]


def roberta(
    model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", bpe=None, **kwargs
) -> RobertaHubInterface:
    """A RoBERTa-family model from a local folder (``model.pt`` + ``dict.txt``), an archive, a URL
    or a known name (roberta.base, roberta.large, roberta.large.mnli), with fairseq's hub methods:
    encode, decode, extract_features (return_all_hiddens), predict,
    register_classification_head, fill_mask. Needs no fairseq. Returned in eval mode.

    Arguments are those of fairseq's ``RobertaModel.from_pretrained``; ``bpe`` (``gpt2``,
    ``bert``, ``sentencepiece``) defaults to what the folder's files imply, so BERT and ALBERT
    folders load too. Keyword options: gpt2_encoder_json, gpt2_vocab_bpe, bpe_vocab_file,
    sentencepiece_model, device, dtype, cache_dir, offline.
    """
    return _from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path, bpe, **kwargs)


def xlmr(
    model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", bpe="sentencepiece", **kwargs
) -> RobertaHubInterface:
    """An XLM-R model, as fairseq's ``XLMRModel.from_pretrained``: a folder with ``model.pt``,
    ``dict.txt`` and ``sentencepiece.bpe.model`` (fairseq's XLM-R archives, or one trained with
    the plugin), an archive, a URL or a known name (xlmr.base, xlmr.large, xlmr.xl, xlmr.xxl), or
    a transformers ``XLMRoberta*`` folder. fairseq's ids for every input; encode (pairs),
    decode, extract_features, extract_features_aligned_to_words, predict, fill_mask. Needs no
    fairseq. Returned in eval mode. Keyword options: those of ``roberta``.
    """
    return _from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path, bpe, **kwargs)


def _named(name: str):
    def load(**kwargs) -> RobertaHubInterface:
        return _from_pretrained(name, **kwargs)

    load.__name__ = name
    load.__doc__ = (
        f"fairseq's released {name} (downloaded once into the cache: $ROBERTA_EXT_CACHE, default "
        f"~/.cache/roberta_ext), as a hub interface with encode, decode, extract_features, predict, "
        f"register_classification_head and fill_mask. Keyword options: device, cache_dir, offline."
    )
    return load


for _name in ("roberta.base", "roberta.large", "roberta.large.mnli", "xlmr.base", "xlmr.large", "xlmr.xl", "xlmr.xxl"):
    globals()[_name] = _named(_name)
del _name
