-- Where each outbox row was stored to go: 'paper', or the http bot's base URL in its canonical form
-- (scheme://host:port/prefix). A dispatcher sends a row only to that target, so that a bots file changed since
-- (or another server's, different one) never sends an order somewhere its trader did not mean. Rows stored
-- before this migration have none (NULL) and go wherever their bot is delivered now, as before. A nullable
-- column without a default: adding it rewrites no row.
ALTER TABLE outbox ADD COLUMN target TEXT;
