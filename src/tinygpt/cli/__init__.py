"""The command lines over the package: sampling, the attention page, export to transformers (scripts/ wraps each)."""
