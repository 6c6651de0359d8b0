"""The installed package's fast forms of the recurrence (packed CPU products, directions on threads, a hand-written
backward, compiled GPU steps), chosen per model with `packed_kernels.use_packed_kernels`; never shipped to the Hub.
"""
