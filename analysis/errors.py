"""The two ways aggregation reports a problem: a hard error or an explicit warning."""


class AggregationError(ValueError):
    """Input that cannot be aggregated (bad path, unknown layout, unknown group key, ...)."""


class AggregationWarning(UserWarning):
    """Data that is used only in part (missing seeds, early ends, dropped tasks or runs)."""
