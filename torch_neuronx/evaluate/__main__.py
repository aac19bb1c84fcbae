"""``python -m torch_neuronx.evaluate``: the ``neuron-evaluate`` command."""

import sys

from .cli import main

sys.exit(main())
