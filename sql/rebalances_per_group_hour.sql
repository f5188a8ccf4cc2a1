-- Rebalances per group and hour (UTC). DataFusion (delta-rs): python -m controlplane sql sql/rebalances_per_group_hour.sql
SELECT group_id,
       date_trunc('hour', to_timestamp_millis(at_ms)) AS hour,
       count(*) AS rebalances
FROM group_events
WHERE kind = 'rebalance_started'
GROUP BY group_id, date_trunc('hour', to_timestamp_millis(at_ms))
ORDER BY group_id, hour
