"""Experiment 3's predictions and their criteria (configs/experiment/partial_leaks.yaml holds their values). Types
only: each value, with its comment, lives in the config; this class is the schema that refuses a mistyped key or a
wrong type there (tinygpt.experiments.registry registers it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Prediction:
    collapse_fraction: float
    onset_run: int
    onset_alpha: float
    onset_fraction: float
    onset_ratio: list[float]
    fill_slack: float
    alarm_first_validation: bool
    open_mass: float
    replace_fill_rule: str
    seen_seeds: list[int]
