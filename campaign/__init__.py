"""The campaign engine: scheduler, workers (local processes or Ray actors), row store, failure buckets."""
