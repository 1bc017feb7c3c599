"""Session records: the store interface, the SQLite and memory stores, the recorder,
retention."""
