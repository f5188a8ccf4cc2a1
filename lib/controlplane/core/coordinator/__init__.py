"""Kafka's classic group coordinator as a pure state machine.

JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit/Fetch, DescribeGroup, DeleteGroup.
"""
