"""The data: corpus -> tokenizer -> cached token ids -> training and validation windows, as a Lightning
DataModule. Beside ``model``; imports only ``runtime`` of tinygpt."""
