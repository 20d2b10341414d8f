-- The time indexes of logs and dedup keys serve only the console's counts since a time and the pruning, both
-- over rows appended in time order: block-range indexes answer those as well and cost almost nothing per
-- insert, where a B-tree costs every alert an index insertion per log row and per key.
DROP INDEX logs_by_time;
CREATE INDEX logs_by_time ON logs USING brin (ts_ms);
DROP INDEX dedup_keys_by_time;
CREATE INDEX dedup_keys_by_time ON dedup_keys USING brin (ts_ms);
