"""The model families, one module each, and the registry that finds them by name.

Each family module (``roberta``, ``bert``, ``albert``, ``electra``, ``spanbert``, ``xlmr``,
``modernbert``) holds what is its own — presets, tokenizer kind, pair layout, transformers names and config hooks,
pretraining-only modules and heads, its fairseq architectures' extra defaults — in one
:class:`Family` record called ``FAMILY``. Adding a family is a new module here and one
``register_family`` line below; see docs/adding-a-family.md.

>>> [family.name for family in families()]
['roberta', 'bert', 'albert', 'electra', 'spanbert', 'xlmr', 'modernbert']
>>> get_family("albert").preset("base").share_layers
'all'
"""

from . import albert, bert, electra, modernbert, roberta, spanbert, xlmr
from .base import (
    SEQUENCE_HEAD,
    TOKEN_HEAD,
    Family,
    TransformersLayout,
    families,
    family_of_transformers,
    get_family,
    preset,
    register_family,
)

register_family(roberta.FAMILY)
register_family(bert.FAMILY)
register_family(albert.FAMILY)
register_family(electra.FAMILY)
register_family(spanbert.FAMILY)
register_family(xlmr.FAMILY)
register_family(modernbert.FAMILY)

__all__ = [
    "SEQUENCE_HEAD",
    "TOKEN_HEAD",
    "Family",
    "TransformersLayout",
    "families",
    "family_of_transformers",
    "get_family",
    "preset",
    "register_family",
]
