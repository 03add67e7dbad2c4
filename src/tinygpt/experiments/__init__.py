"""The experiments, one folder each: ``<name>/report.py`` (the findings from a sweep's runs, then the report),
``<name>/report.md`` (its prose, named blocks with placeholders) and whatever code only it runs (``partial_leaks/
bugs.py``, the mask bugs it plugs into a model; ``sqrt_dk/lr_basin.py``, its optimum and basin measures). Its
config is ``configs/experiment/<name>.yaml`` (arms: ``configs/arm/<name>/``), its design and report
``docs/experiments/<name>/``, its tests ``tests/experiments/<name>/``. A new experiment is such a folder and one line
of ``report.EXPERIMENTS``.

Nothing here is reachable from a model's own settings: a run gets a bug only by naming one (``attention_bug``).
"""
