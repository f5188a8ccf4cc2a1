"""controlplane: Kafka group coordinator and mutation quota as streaming state machines."""
