"""Sources (landing directory, Kafka, Delta) and Delta sinks of the streaming engine."""
