"""neuronxcc.nki.compiler: allocation hints (accepted, ignored; see nki.compiler)."""

from nki.compiler import *  # noqa: F401,F403
