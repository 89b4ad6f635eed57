"""The other seeds' architectures as registered families: ``crate`` (+ ``crate-gpt``
baseline), ``mxd``, ``reetym``, ``cocomix`` (+ ``cocomix-pause``, ``cocomix-kd``
baselines). See docs/zoo.md for their parameter and FLOP accounting.

Imports only submodules of ``interpscale.models`` (never the package top level), because
``interpscale/models/__init__.py`` imports this package at its end.
"""

from interpscale.models.zoo.catalog import ZOO_FAMILIES, register, zoo_config

register()

__all__ = ["ZOO_FAMILIES", "register", "zoo_config"]
