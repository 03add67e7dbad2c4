"""Experiment 2: does 1/sqrt(d_k) keep the softmax out of saturation, and does that make training better? The
mechanism at init and through training, the consequences for the loss, and float16 (docs/experiments/sqrt_dk/)."""

from tinygpt.experiments.registry import Experiment
from tinygpt.experiments.sqrt_dk.prediction import Prediction

# its full sweep is two configs' (float32 and float16); stage 2 adds float32 runs that override only the grid's keys,
# and the float32 reruns of diverged float16 runs and the float16 replay probed at every step (amendment 2) are variants
EXPERIMENT = Experiment("sqrt_dk", Prediction, order=2, sweeps=("sqrt_dk", "sqrt_dk_fp16"),
                        variants=("sqrt_dk_quick", "sqrt_dk_fp32", "sqrt_dk_fp16_probe"),
                        staged=("sqrt_dk", "sqrt_dk_fp32", "sqrt_dk_fp16_probe"))
