"""The lessons' code blocks run as tests (Sybil): every ```python block, with its printed output checked the way
doctest checks it. A change to the attention that breaks a lesson fails `make test`."""

from doctest import ELLIPSIS, NORMALIZE_WHITESPACE

from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser

pytest_collect_file = Sybil(
    parsers=[PythonCodeBlockParser(doctest_optionflags=ELLIPSIS | NORMALIZE_WHITESPACE)],
    patterns=["*.md"],
).pytest()
