-- When a bot was last taken over from a server that stopped without giving its lease back (Unix ms; 0 never).
-- Rows of the bot created before may have been sent by that server without being recorded. Kept with the
-- lease, not only by the server that took it over: that server may give the lease back (its sync done, or
-- stopping) before it has worked those rows, and the next server to take the bot must still look them up
-- rather than send them as never sent.
ALTER TABLE bot_leases ADD COLUMN unsure_ms BIGINT NOT NULL DEFAULT 0;
