"""The worked example (templates/experiment/README.md): does GPT-2's tanh approximation of the GELU change the
validation loss? Copied into a checkout, this record is what makes it an experiment: the registry finds it here."""

from tinygpt.experiments.registry import Experiment
from tinygpt.experiments.tanh_gelu.prediction import Prediction

EXPERIMENT = Experiment("tanh_gelu", Prediction)
