"""The worked example's prediction (configs/experiment/tanh_gelu.yaml holds its value; docs/experiments/tanh_gelu/
DESIGN.md states it). Types only: this class is the schema that refuses a mistyped key or a wrong type there."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Prediction:
    band: float  # nats: the tanh arm's validation loss minus the exact arm's lies within +- band
