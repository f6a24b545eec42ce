"""quantgate: quantize a served LLM, prove on its own traffic which variant is safe, gate it.

The code lives in the top-level folders ``kernels/``, ``tasks/``, ``flows/`` and ``conf/``,
installed as ``quantgate.kernels`` and so on (see pyproject.toml).
"""

__version__ = "0.1.0"
