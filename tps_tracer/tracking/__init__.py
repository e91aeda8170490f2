"""The trajectory core shared by every adapter: one record per run, its rules and the capture worker
(`tracker.py`), the metadata keys users and adapters share (`keys.py`)."""
