"""Where worker processes come from: a provider asks for one and gives one back (esault.cluster.providers.base)."""
