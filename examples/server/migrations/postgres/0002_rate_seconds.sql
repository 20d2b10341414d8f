-- The rate count read every counted delivery of the window, one row each: under a high rate limit thousands
-- of rows per alert. Counts per strategy and second make it at most one window's seconds plus the marks of the
-- one second the window's start falls in; `rate_marks` keeps each delivery's time for that second.
CREATE TABLE rate_seconds (
    strategy TEXT NOT NULL,
    second BIGINT NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (strategy, second)
);
INSERT INTO rate_seconds (strategy, second, n)
    SELECT strategy, ts_ms / 1000, count(*) FROM rate_marks GROUP BY strategy, ts_ms / 1000;
