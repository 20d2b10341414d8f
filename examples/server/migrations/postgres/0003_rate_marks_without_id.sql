-- Rate marks are only ever read by (strategy, time) and deleted by time: their row id and its index cost every
-- counted delivery a sequence step and an index insert for nothing.
ALTER TABLE rate_marks DROP COLUMN id;
