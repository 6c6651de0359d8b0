"""The installed package's fast forms of the recurrence (packed CPU products, directions on threads, a hand-written
backward, compiled GPU steps), chosen per model with `packed_kernels.use_packed_kernels` (CPU inference: looked up by
the model file itself, `modeling_elmo.installed_packed_recurrence`); never shipped to the Hub.
"""
