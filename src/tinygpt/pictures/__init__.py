"""What a run's attention looks like: the heatmaps (matplotlib, blitted during training) and the interactive explorer
page (Plotly), drawn from attention weights alone.

Above ``model`` (the attention entropy it shows is the model's own measure) and below ``train`` (whose probes draw
them during a run), the CLIs and the reports draw them too.
"""
