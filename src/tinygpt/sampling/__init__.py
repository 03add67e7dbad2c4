"""Text from a trained model: the generation loop (temperature, top-k, left-padded batches, the KV cache) and its
CPU fast path for decoding (a lean cached step, one-row products split over the cores).

Above ``model`` (it drives a GPT, built and cached there) and below ``train`` (whose text samples use it).
"""
