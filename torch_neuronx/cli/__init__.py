"""Command-line tools: ``neuron-ls`` and ``neuron-top`` (console scripts)."""
