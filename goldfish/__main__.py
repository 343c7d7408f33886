"""``python -m goldfish ...`` (what ``torchrun -m goldfish train ...`` runs)."""

from .cli import run

run()
