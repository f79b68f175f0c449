"""The four algorithm families of the paper (section V), one module each.

:mod:`.dense_shift_15d` (1.5D dense shifting, V-A), :mod:`.sparse_shift_15d` (1.5D sparse
shifting, V-B), :mod:`.dense_replicate_25d` (2.5D dense replicating, V-C) and
:mod:`.sparse_replicate_25d` (2.5D sparse replicating, V-D), on the shared base class in
:mod:`.base`. Applications reach them by name through :func:`distmm.distribute`; the registry
is :data:`distmm.api.ALGORITHMS`. docs/algorithms/ describes each family.
"""
