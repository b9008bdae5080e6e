"""The encoder core in plain PyTorch: the config, the transformer (written once) and its heads.

Every family (RoBERTa, BERT, ALBERT, ...) is the same :class:`EncoderModel` (fairseq's name:
``RobertaModel``) built from a different :class:`EncoderConfig`, and every feature uses it
through its typed interface (:meth:`EncoderModel.features` -> :class:`EncoderOutput`, ``device``,
``dtype``, ``inference()``); what each family adds, presets included, lives in
:mod:`roberta_ext.families`, which this package never imports: it stands alone on torch
(``tests/modeling/test_imports.py`` reads the code to keep it so). How the encoder attends over
padded batches is each model's choice among :data:`ATTENTION_STRATEGIES` (:mod:`.attention`).
"""

from .attention import ATTENTION_STRATEGIES, use_attention
from .config import EncoderConfig
from .encoder import TransformerEncoder, TransformerEncoderLayer
from .heads import ClassificationHead, LMHead, PooledClassificationHead, Pooler, TokenClassificationHead
from .model import ENCODER_PREFIX, EncoderModel, EncoderOutput, RobertaModel

__all__ = [
    "ATTENTION_STRATEGIES",
    "ClassificationHead",
    "EncoderConfig",
    "ENCODER_PREFIX",
    "EncoderModel",
    "EncoderOutput",
    "LMHead",
    "PooledClassificationHead",
    "Pooler",
    "RobertaModel",
    "TokenClassificationHead",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "use_attention",
]
