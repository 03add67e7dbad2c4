"""Experiment 3: real-world partial mask bugs, plugged into the model, seen by the loss and the leak alarm
(docs/experiments/partial_leaks/)."""
