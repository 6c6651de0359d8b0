"""The installed package's fast forms of the recurrence (packed CPU products, directions on threads, a hand-written
backward, compiled GPU steps): the shipped model file calls `packed_kernels.packed_lstm` where
``config.use_packed_kernels`` is true; never shipped to the Hub.
"""
