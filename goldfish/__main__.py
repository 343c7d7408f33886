"""``python -m goldfish ...`` (what ``torchrun -m goldfish train ...`` runs)."""

import sys

from .cli import main

sys.exit(main())
