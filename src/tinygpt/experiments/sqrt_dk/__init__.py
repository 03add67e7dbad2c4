"""Experiment 2: does 1/sqrt(d_k) keep training stable? Its optimum, basin and LR sensitivity
(docs/experiments/sqrt_dk/)."""

from tinygpt.experiments.registry import Experiment
from tinygpt.experiments.sqrt_dk.prediction import Prediction

# its full sweep is two configs' (float32 and float16); stage 2 adds float32 runs that override only the grid's keys
EXPERIMENT = Experiment("sqrt_dk", Prediction, sweeps=("sqrt_dk", "sqrt_dk_fp16"), variants=("sqrt_dk_quick",),
                        staged=("sqrt_dk",))
