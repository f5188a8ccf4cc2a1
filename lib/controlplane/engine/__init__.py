"""The streaming shell: Spark sessions, the GroupState adapter, keying and the two queries."""
