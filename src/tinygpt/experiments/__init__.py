"""The experiments, one folder each, found by tinygpt.experiments.registry: ``<name>/__init__.py`` holds its record
(``EXPERIMENT``: its configs, its prediction type, whether it is staged), ``<name>/prediction.py`` its predictions'
types, ``<name>/report.py`` the findings from a sweep's runs and then the report, ``<name>/report.md`` its prose
(named blocks with placeholders), and whatever code only it runs (``partial_leaks/bugs.py``, the mask bugs it patches
into a model; ``sqrt_dk/lr_basin.py``, its optimum and basin measures). Its configs are
``configs/experiment/<name>*.yaml`` (arms: ``configs/arm/<name>/``), its design and report ``docs/experiments/<name>/``,
its tests ``tests/experiments/<name>/``. Nothing outside its folder and those names it.
"""
