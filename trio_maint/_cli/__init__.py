"""The ``trio-maint`` command line (``demo``, ``demo --cluster``, ``monitor``): the top of
the stack, a user of the library like any other.

May import: the public API (:mod:`trio_maint`, :mod:`trio_maint.lowlevel`),
:mod:`trio_maint.testing`, and the exception-group helper of ``_net``
(:mod:`trio_maint._net.groups`).
"""
