-- Rebalances per group and hour (UTC).
-- Spark SQL twin of sql/rebalances_per_group_hour.sql (timestamp_millis).
SELECT group_id,
       date_trunc('HOUR', timestamp_millis(at_ms)) AS hour,
       count(*) AS rebalances
FROM group_events
WHERE kind = 'rebalance_started'
GROUP BY group_id, date_trunc('HOUR', timestamp_millis(at_ms))
ORDER BY group_id, hour
