-- The shared store of several servers: the embedded SQLite database's tables, plus what sharing needs
-- (versions that other servers poll, bot leases, notification claims). Applied once, in one transaction.

CREATE TABLE logs (
    id BIGSERIAL PRIMARY KEY,
    ts_ms BIGINT NOT NULL,
    strategy TEXT NOT NULL,
    level TEXT NOT NULL,
    message TEXT NOT NULL,
    decision TEXT NOT NULL,
    http_status INTEGER NOT NULL,
    alerts TEXT NOT NULL
);
CREATE INDEX logs_by_strategy ON logs (strategy, id);
CREATE INDEX logs_by_time ON logs (ts_ms);

-- A rotation bumps `version`; every server polls for versions above the last it applied.
CREATE SEQUENCE token_versions;
CREATE TABLE token_overrides (
    strategy TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL,
    rotated_ms BIGINT NOT NULL,
    version BIGINT NOT NULL DEFAULT nextval('token_versions')
);

-- One row per claimed key: the claim is this table's unique-key insert, in the transaction that stores the
-- alert's outbox rows. A key past its window is claimed again by updating its row.
CREATE TABLE dedup_keys (
    strategy TEXT NOT NULL,
    key TEXT NOT NULL,
    ts_ms BIGINT NOT NULL,
    dup_logged BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (strategy, key)
);
CREATE INDEX dedup_keys_by_time ON dedup_keys (ts_ms);

-- One row per counted delivery, so the count over the window is exact across servers.
CREATE TABLE rate_marks (
    id BIGSERIAL PRIMARY KEY,
    strategy TEXT NOT NULL,
    ts_ms BIGINT NOT NULL
);
CREATE INDEX rate_marks_by_strategy ON rate_marks (strategy, ts_ms);

CREATE TABLE outbox (
    id BIGSERIAL PRIMARY KEY,
    strategy TEXT NOT NULL,
    bot TEXT NOT NULL,
    broker TEXT NOT NULL,
    kind TEXT NOT NULL,
    client_order_id TEXT NOT NULL,
    order_id TEXT,
    keeps_order_id BOOLEAN,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    content_type TEXT,
    body BYTEA NOT NULL,
    meaning TEXT,
    status TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    result TEXT,
    done_ms BIGINT,
    after_coid TEXT,
    deadline_ms BIGINT
);
CREATE INDEX outbox_open ON outbox (strategy, bot, id) WHERE status IN ('pending', 'sending');
CREATE INDEX outbox_by_strategy ON outbox (strategy, id);

-- Each write bumps `version`, so a server deciding an alert sees another server's fills.
CREATE SEQUENCE bot_state_versions;
CREATE TABLE bot_state (
    strategy TEXT NOT NULL,
    bot TEXT NOT NULL,
    state TEXT NOT NULL,
    version BIGINT NOT NULL DEFAULT nextval('bot_state_versions'),
    PRIMARY KEY (strategy, bot)
);

-- One server at a time sends a bot's outbox rows and reads its account: the holder of its lease. A lease that
-- is not renewed expires, and another server takes the bot over.
CREATE TABLE bot_leases (
    strategy TEXT NOT NULL,
    bot TEXT NOT NULL,
    holder TEXT,
    expires_ms BIGINT NOT NULL,
    PRIMARY KEY (strategy, bot)
);

CREATE TABLE notifications (
    id BIGSERIAL PRIMARY KEY,
    strategy TEXT NOT NULL,
    event TEXT NOT NULL,
    text TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    status TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_ms BIGINT NOT NULL,
    last_error TEXT,
    -- The server sending it, until when: another server leaves it alone meanwhile.
    claimed_until BIGINT
);
CREATE INDEX notifications_due ON notifications (next_ms) WHERE status = 'pending';
