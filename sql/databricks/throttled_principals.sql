SELECT `user`, quota_key,
       count(*) AS throttled_requests,
       sum(throttle_time_ms) AS throttle_ms_total,
       max(throttle_time_ms) AS throttle_ms_max,
       sum(size(rejected_topics)) AS rejected_topics
FROM throttle_events
GROUP BY `user`, quota_key
ORDER BY throttle_ms_total DESC, `user`
