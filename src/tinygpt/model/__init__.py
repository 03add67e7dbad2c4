"""The model: attention written from the formula, the GPT around it and its KV cache (sampling: tinygpt.sampling).

Bottom layer with ``runtime``: imports nothing of tinygpt above it (tests/test_layout.py checks it).
"""
