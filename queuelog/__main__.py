"""``python -m queuelog ...``: the same as the ``queuelog`` console script."""
from queuelog.cli import main

main(prog_name="queuelog")
