"""Experiment 2's predictions and their criteria (configs/experiment/sqrt_dk.yaml holds their values). Types only: each
value, with its comment, lives in the config; this class is the schema that refuses a mistyped key or a wrong type
there (tinygpt.experiments.registry registers it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Prediction:
    basin_delta: float
    sensitivity_range: list[float]
    optimum_shift: str
    best_loss_gap: str
    basin_gap: str
    basin_growth: str
    sensitivity_gap: str
    qknorm_effect: str
    fp16_min_unscaled: int
    fp16_max_scaled: int
    failed_to_train: float
