-- When the read of the bot's account that produced each stored state started (Unix ms, the lease holder's clock): a
-- server deciding an alert against the stored state, while another server delivered the bot's entries, tells from
-- it whether an entry done since has been read back yet, and waits for that read. A delivery's own write of the
-- state keeps it (the state is that read's, with the delivery's change). NULL for states stored before this
-- migration, or since by an older version during a rolling upgrade: no entry is waited for on them. A nullable
-- column without a default: adding it rewrites no row.
ALTER TABLE bot_state ADD COLUMN read_ms BIGINT;
