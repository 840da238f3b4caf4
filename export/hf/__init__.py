"""Hugging Face translation models under the decode-step contract (service.runtime.graphs):
their encoder and a cached decoder step as PyTorch modules the exporter traces."""
