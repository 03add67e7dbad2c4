"""Experiment 4: why are positional encodings necessary, and when is the causal mask enough
(docs/experiments/positions/)."""

from tinygpt.experiments.positions.prediction import Prediction
from tinygpt.experiments.registry import Experiment

EXPERIMENT = Experiment("positions", Prediction, order=5, variants=("positions_quick",))
