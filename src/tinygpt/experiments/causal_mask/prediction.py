"""Experiment 1's predictions and their criteria (configs/experiment/causal_mask.yaml holds their values). Types only:
each value, with its comment, lives in the config; this class is the schema that refuses a mistyped key or a wrong
type there (tinygpt.experiments.registry registers it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Prediction:
    level_ratio: list[float]
    slope: list[float]
    premise_band: list[float]
    onset_fraction: float
    drop_from: float
    drop_to: float
