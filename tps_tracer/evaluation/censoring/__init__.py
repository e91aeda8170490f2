"""The censoring toolkit: q_Z from continuation rollouts (`continuations.py`, with the resumable
`continuation_log.py`), plug-in and hybrid q_Z models (`q_z_model.py`), the exact-minus-simple
correction (`exact_correction.py`), artificial and informative censoring checks
(`artificial_censoring.py`, `informative.py`)."""
