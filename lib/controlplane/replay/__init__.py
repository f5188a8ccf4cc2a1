"""Replay commands: feed a JSON Lines file of wire events through a core, write its rows.

They import no Spark and no pandas (docs/reference/events.md §8); ``common`` holds what the group
and quota replays share.
"""
