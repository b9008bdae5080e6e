"""The encoder core in plain PyTorch: the config, the transformer (written once) and its heads.

Every family (RoBERTa, BERT, ALBERT, ...) is the same :class:`RobertaModel` built from a
different :class:`EncoderConfig`; what each family adds, presets included, lives in
:mod:`roberta_ext.families`, which this package never imports: it stands alone on torch
(``tests/modeling/test_imports.py`` reads the code to keep it so). How the encoder attends over
padded batches is each model's choice among :data:`ATTENTION_STRATEGIES` (:mod:`.attention`).
"""

from .attention import ATTENTION_STRATEGIES, use_attention
from .config import EncoderConfig
from .encoder import TransformerEncoder, TransformerEncoderLayer
from .heads import ClassificationHead, LMHead, PooledClassificationHead, Pooler, TokenClassificationHead
from .model import RobertaModel

EncoderModel = RobertaModel
"""The family-neutral name of the model class."""

__all__ = [
    "ATTENTION_STRATEGIES",
    "ClassificationHead",
    "EncoderConfig",
    "EncoderModel",
    "LMHead",
    "PooledClassificationHead",
    "Pooler",
    "RobertaModel",
    "TokenClassificationHead",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "use_attention",
]
