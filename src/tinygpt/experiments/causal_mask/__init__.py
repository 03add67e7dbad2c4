"""Experiment 1: what removing the causal mask does to the losses (docs/experiments/causal_mask/)."""

from tinygpt.experiments.causal_mask.prediction import Prediction
from tinygpt.experiments.registry import Experiment

EXPERIMENT = Experiment("causal_mask", Prediction, order=1, variants=("causal_mask_quick",))
