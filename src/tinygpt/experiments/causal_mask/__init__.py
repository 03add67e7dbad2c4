"""Experiment 1: what removing the causal mask does to the losses (docs/experiments/causal_mask/)."""
