"""interpscale: scaling studies of interpretable-by-design language models.

Subpackages (see docs/architecture.md): ``models``, ``orchestration``, ``metrics``, ``judges``,
``scaling``, ``analysis``.  Import them explicitly; this top-level module stays light so
``import interpscale.scaling`` never pulls in torch.
"""

__version__ = "0.1.0"
