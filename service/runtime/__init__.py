"""The torch-free runtime, used by every process and by the PyTorch side alike: the graphs'
interface, engines (onnxruntime), the continuous batch and its row stores, decoding
strategies and their search, tokenizer and image decoding, the model kinds, the model
repository, and the typed errors."""
