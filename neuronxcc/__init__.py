"""OpenNeuron's stand-in for the `neuronxcc` package: only its NKI front end
(neuronxcc.nki), the legacy API generation, on the same core as `nki`."""
