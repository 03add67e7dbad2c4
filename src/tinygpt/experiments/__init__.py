"""Code an experiment runs inside training: the deliberate bugs experiment 3 (partial leaks) plugs into a model.
Nothing here is reachable from the model's own settings; a run gets a bug only by naming one (``attention_bug``)."""
