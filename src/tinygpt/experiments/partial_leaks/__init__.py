"""Experiment 3: real-world partial mask bugs, plugged into the model, seen by the loss and the leak alarm
(docs/experiments/partial_leaks/)."""

from tinygpt.experiments.partial_leaks.prediction import Prediction
from tinygpt.experiments.registry import Experiment

EXPERIMENT = Experiment("partial_leaks", Prediction, order=3, variants=("partial_leaks_quick",))
