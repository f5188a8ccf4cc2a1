"""Python clients of the coordinator and the quota: a group member with Kafka consumer
semantics (KIP-41, KIP-62, KIP-345), an admin client (KIP-599 retries), their clocks, timeouts
and transports. See docs/client.md."""
