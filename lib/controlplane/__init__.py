"""controlplane: Kafka group coordinator and controller mutation quota as streaming state machines."""
