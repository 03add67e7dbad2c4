"""Experiment 2, design 3: does 1/sqrt(d_k) help stability, as the learning rate at which training stops working
(docs/experiments/sqrt_dk_stability/)."""

from tinygpt.experiments.registry import Experiment
from tinygpt.experiments.sqrt_dk_stability.prediction import Prediction

EXPERIMENT = Experiment("sqrt_dk_stability", Prediction, order=4, variants=("sqrt_dk_stability_quick",))
