"""The model: attention written from the formula, the GPT around it, the KV cache and sampling.

Bottom layer with ``runtime``: imports nothing of tinygpt above it (tests/test_layout.py checks it).
"""
