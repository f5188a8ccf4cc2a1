-- Principals throttled by the controller mutation quota (KIP-599) and their throttle time.
-- (`user` is qualified as t.user: DataFusion and Spark quote identifiers differently.)
SELECT t.user, t.quota_key,
       count(*) AS throttled_requests,
       sum(t.throttle_time_ms) AS throttle_ms_total,
       max(t.throttle_time_ms) AS throttle_ms_max,
       sum(cardinality(t.rejected_topics)) AS rejected_topics
FROM throttle_events t
GROUP BY t.user, t.quota_key
ORDER BY throttle_ms_total DESC, t.user
