"""``python -m roberta_ext ...`` runs the ``roberta-ext`` command line."""

import sys

from .cli import main

sys.exit(main())
