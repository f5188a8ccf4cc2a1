"""Kafka's classic group coordinator (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, offsets) as a pure state machine."""
