"""The trajectory core shared by every adapter: one record per run and its rules (`tracker.py`),
the capture worker (`worker.py`), the metadata keys users and adapters share (`keys.py`)."""
