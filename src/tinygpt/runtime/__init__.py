"""The process around a run: one-line errors, shared value checks, checkpoints, signals, several processes,
W&B, run directories and the fast exit. The bottom layer: imports nothing else of tinygpt."""
