"""The tensor model: the classes (``_tensor``), the O(1) checks of members' shapes and dtypes
(``_shape_checks``), the O(nnz) index checks (``_validate``), the one meaning of *validated*
and the kernels' standard form (``_canonical``), layouts, dtypes (the one dtype policy),
errors, devices, configuration, and the constructors: from member arrays (``_from_arrays``:
``sparse_*_tensor``) and of whole standard tensors (``_construct``: ``zeros``, ``eye``,
``diags``, ``random``, ``rmat``, ``stencil``).

Nothing here imports a backend, the ops or anything above them: the layers above import
this one (kernels in ``_lib`` are below it).
"""
