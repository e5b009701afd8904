"""fusegen: turns every fusion of an XLA:GPU-optimized HLO module into a kernel, through plugins."""

__version__ = "0.1.0"
