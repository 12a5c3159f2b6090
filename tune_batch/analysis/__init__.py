"""What the records say: ``noise`` (half-widths, "beyond noise"), ``points`` (a config's runs
pooled), ``objectives`` (directions, feasibility), ``pareto`` (the front and the choice on it)
and ``report`` (the report of a search as data)."""
