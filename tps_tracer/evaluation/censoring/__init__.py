"""The censoring toolkit: q_Z from continuations and models, the exact-minus-simple correction,
artificial and informative censoring checks."""
