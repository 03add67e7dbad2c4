"""Experiment 2 design 3's predictions' criteria (configs/experiment/sqrt_dk_stability.yaml holds their values;
docs/experiments/sqrt_dk_stability/DESIGN.md states the predictions). Types only: this class is the schema that
refuses a mistyped key or a wrong type there (tinygpt.experiments.registry registers it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Prediction:
    failed_to_train: float
    shift_none: float
    shift_band: float
    slope: float
    slope_band: float
