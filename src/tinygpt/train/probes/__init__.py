"""What a run measures of its model while it trains and at its end: the probe callbacks (attention maps, samples,
stability, the honest loss), the leak alarm, and the diagnostics they compute."""
