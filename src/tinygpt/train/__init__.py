"""One training run: the LightningModule, callbacks and guards, diagnostics, the set-up from the config,
the run from check to summary.json, and train.py's task. Above ``model``, ``data`` and ``runtime``."""
