"""Experiment 2: does 1/sqrt(d_k) keep training stable? Its optimum, basin and LR sensitivity
(docs/experiments/sqrt_dk/)."""
