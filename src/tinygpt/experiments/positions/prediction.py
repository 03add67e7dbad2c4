"""Experiment 4's predictions' criteria (configs/experiment/positions.yaml holds their values;
docs/experiments/positions/DESIGN.md states the predictions). Types only: this class is the schema that refuses a
mistyped key or a wrong type there (tinygpt.experiments.registry registers it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Prediction:
    m_band: float
    m3_band: float
    p4_max: float
    c_band: float
    l_band: float
    l_rope: float
