"""Experiment 2's predictions' criteria (configs/experiment/sqrt_dk.yaml holds their values; DESIGN.md states the
predictions). Types only: each value, with its comment, lives in the config; this class is the schema that refuses a
mistyped key or a wrong type there (tinygpt.experiments.registry registers it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Prediction:
    basin_delta: float
    spike_nats: float
    saturation_band: float
    mechanism_lr: float
    match_loss_band: float
    match_optimum_band: float
    failed_to_train: float
