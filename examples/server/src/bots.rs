//! How each bot's orders are delivered: `--bots FILE`, a JSON object mapping bot id to its delivery.
//!
//! ```json
//! {
//!   "live-main": {
//!     "delivery": "http",
//!     "base_url": "https://api.broker.example",
//!     "headers": { "X-Api-Key": { "env": "BROKER_KEY" }, "X-Api-Secret": { "file": "/run/secrets/broker" } },
//!     "timeout_ms": 10000
//!   },
//!   "second-account": {
//!     "delivery": "http",
//!     "base_url": "https://api.other-broker.example",
//!     "auth": { "header": "Authorization", "prefix": "Bearer ", "env": "BROKER_TOKEN" },
//!     "sync_interval_secs": 30
//!   },
//!   "demo-bot": { "delivery": "paper" }
//! }
//! ```
//!
//! The headers are whatever the bot's broker authenticates with (docs/server.md shows each broker's); `auth`
//! may also be an OAuth2 refresh or a per-request JWT ([`crate::session`]).
//! Secrets are read from the environment or a file, never from a strategy file (which the server never
//! writes and may be shared). Bots not listed are `paper`, so a fresh machine trades nothing real; with a file
//! given, such a bot and an entry no bot has are each an ERROR at load ([`Bots::unlisted`], [`Bots::unused`]).

use crate::session::{self, AuthConfig, Session};
use serde::Deserialize;
use sha2::Digest as _;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Where a secret (or any header value) comes from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// An environment variable (its value, trailing newline removed).
    #[serde(default)]
    env: Option<String>,
    /// A file (its content, trailing newline removed).
    #[serde(default)]
    file: Option<String>,
    /// A literal value: for headers that are not secret.
    #[serde(default)]
    value: Option<String>,
}

impl Source {
    /// A secret from an environment variable or a file.
    pub fn secret(env: Option<String>, file: Option<String>) -> Source {
        Source { env, file, value: None }
    }

    /// The value, or why it cannot be had (naming `what`, never the value).
    pub fn resolve(&self, what: &str) -> Result<String, String> {
        match (&self.env, &self.file, &self.value) {
            // Trimmed as a file's is: a variable filled from a file (a Kubernetes secret made
            // `--from-file`) keeps its newline, which no header may hold.
            (Some(var), None, None) => std::env::var(var)
                .map(|s| s.trim_end_matches(['\r', '\n']).to_owned())
                .map_err(|_| format!("{what}: environment variable {var} is not set")),
            (None, Some(path), None) => std::fs::read_to_string(path)
                .map(|s| s.trim_end_matches(['\r', '\n']).to_owned())
                .map_err(|e| format!("{what}: cannot read {path}: {e}")),
            (None, None, Some(v)) => Ok(v.clone()),
            _ => Err(format!("{what}: give exactly one of `env`, `file` or `value`")),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "delivery", rename_all = "lowercase", deny_unknown_fields)]
enum Entry {
    Paper {},
    Http(Box<HttpEntry>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpEntry {
    base_url: String,
    /// A `{"header", "prefix", "env"|"file"}` object without a `type`, or a typed [`AuthConfig`].
    #[serde(default)]
    auth: Option<serde_json::Value>,
    #[serde(default)]
    headers: HashMap<String, Source>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    sync_interval_secs: Option<u64>,
    #[serde(default)]
    settle_ms: Option<u64>,
}

/// A broker reached over HTTP(S).
#[derive(Debug, Clone)]
pub struct HttpBot {
    /// `http` or `https`.
    pub tls: bool,
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Path prefix of the base URL (no trailing slash), put before the core's path.
    pub prefix: String,
    /// The bot's authentication: every request's auth headers (static ones included) come from it.
    pub session: Arc<Session>,
    /// Time allowed for one request, connection included.
    pub timeout: Duration,
    /// How often the bot's positions and working orders are read back from the broker.
    pub sync_interval: Duration,
    /// How long a broker is given to finish a request whose answer was lost before the order is looked up, and
    /// again before a lookup that found nothing is believed: a broker still working on the request would
    /// otherwise be asked too early, answer "not there", and take the resend as a second order.
    pub settle: Duration,
    /// Where this bot's requests go, in one canonical form ([`HttpBot::target`]): made once from the base URL
    /// and the credentials, since every stored order and every delivery compares against it.
    target: String,
}

/// How a bot's orders are delivered.
#[derive(Debug, Clone)]
pub enum Delivery {
    /// The simulated broker inside the server.
    Paper,
    /// A real broker's API.
    Http(HttpBot),
}

/// [`HttpBot::settle`] when the bots file does not say: a broker that took a request usually has the order
/// in its lists within a second.
pub const DEFAULT_SETTLE_MS: u64 = 2_000;

/// The target of a paper bot's rows, as [`Delivery::target`] gives it.
pub const PAPER_TARGET: &str = "paper";

impl HttpBot {
    /// Where this bot's requests go, in one canonical form: `scheme://host:port/prefix`, with the host in
    /// lower case (host names are not case-sensitive), the port always written and no trailing slash, so that
    /// `https://API.example.com/v2/` and `https://api.example.com:443/v2` are the same target. The base URL
    /// can hold neither credentials nor a query ([`Bots::from_json`] refuses both), so neither can this.
    ///
    /// A bot given credentials (headers or `auth`) has their fingerprint after the URL:
    /// `https://api.example.com:443/v2 (keys 0123456789ab)`. Where the broker's paths name no account, the
    /// keys pick it, so two bots files with one base URL and other keys may trade two accounts
    /// ([`stored_elsewhere`]).
    pub fn target(&self) -> &str {
        &self.target
    }
}

/// `scheme://host:port{path}`, an IPv6 address in brackets so that its colons are not read as the port's: how
/// a request's URI and a bot's target are written.
pub fn uri(tls: bool, host: &str, port: u16, path: &str) -> String {
    let scheme = if tls { "https" } else { "http" };
    if host.contains(':') {
        format!("{scheme}://[{host}]:{port}{path}")
    } else {
        format!("{scheme}://{host}:{port}{path}")
    }
}

impl Delivery {
    /// Where a row stored for this delivery is meant to go: [`PAPER_TARGET`], or the http bot's
    /// [`HttpBot::target`]. Each outbox row records the target it was stored for, and the dispatcher sends
    /// it only to that target: a bots file changed between the two must not send an order somewhere its
    /// trader never meant (a live account instead of a paper one) nor fill on paper an order meant for a
    /// broker.
    pub fn target(&self) -> &str {
        match self {
            Delivery::Paper => PAPER_TARGET,
            Delivery::Http(h) => h.target(),
        }
    }
}

/// What separates a target's URL from its credentials' fingerprint ([`HttpBot::target`]); a closing `)` ends it.
const KEYS_MARK: &str = " (keys ";

/// How many hex digits of the credentials' SHA-256 a target keeps: enough that two accounts' keys never share
/// one by chance. Being a hash, it cannot be read back into a key (and keys are too long and random to guess).
const KEYS_DIGITS: usize = 12;

/// The fingerprint of a bot's credentials (each a label and its value as read), or `None` for a bot given none.
/// Their order in the bots file does not count; each part is written with its length, so that no two lists
/// hash alike by moving text from one value into the next.
fn fingerprint(mut credentials: Vec<(String, String)>) -> Option<String> {
    if credentials.is_empty() {
        return None;
    }
    credentials.sort();
    let mut hash = sha2::Sha256::new();
    for (label, value) in &credentials {
        for part in [label, value] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part.as_bytes());
        }
    }
    let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Some(hex[..KEYS_DIGITS].to_owned())
}

/// A target's URL and its credentials' fingerprint, if it has one ([`HttpBot::target`]).
fn split_target(target: &str) -> (&str, Option<&str>) {
    let fingerprinted = target.strip_suffix(')').and_then(|t| t.rsplit_once(KEYS_MARK));
    match fingerprinted {
        Some((url, keys)) if keys.len() == KEYS_DIGITS && keys.bytes().all(|b| b.is_ascii_hexdigit()) => {
            (url, Some(keys))
        }
        _ => (target, None),
    }
}

/// Whether the keys pick the account at the broker a row or state names (`broker` as a strategy writes it):
/// its paths name none. A broker this version does not know is taken to be such a broker, the side on which a
/// change of keys stops its rows rather than sends them.
pub fn keys_pick_account(broker: &str) -> bool {
    !strategy_webhook::broker::BrokerId::from_name(broker).is_some_and(|b| b.broker().names_account())
}

/// Whether a row stored for `stored` ([`Delivery::target`]; `None` for rows of a version that recorded none,
/// delivered as configured) must not go to `current`: the one rule the dispatcher, the admin API's retry advice
/// and the check of a bot's stored state share. Another URL is always elsewhere. Where the keys pick the account
/// (`keys_pick_account`), other keys are too: a row stored under account A's keys would trade account B, so a
/// key rotation on one account also stops the rows stored before it. Where the paths name the account, a change
/// of keys is not a move (the account is checked on the path, `dispatch::account_moved`). A stored target with
/// no fingerprint (stored by a version before them, or of a bot given no credentials then) matches on its URL
/// alone, as it did: failing every pending row at an upgrade would help no one.
pub fn stored_elsewhere(stored: Option<&str>, current: &str, keys_pick_account: bool) -> bool {
    let Some(stored) = stored else { return false };
    let ((stored_url, stored_keys), (current_url, current_keys)) = (split_target(stored), split_target(current));
    stored_url != current_url || (keys_pick_account && stored_keys.is_some_and(|k| Some(k) != current_keys))
}

/// The broker account a bot trades, as far as the bots file and the snapshot tell ([`Bots::account`]): two bots
/// with equal ones trade one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    broker: strategy_webhook::broker::BrokerId,
    /// The target's URL, then the credentials' fingerprint where they pick the account, or the `account_id`
    /// where the paths name it (a change of keys is then no other account, as in [`stored_elsewhere`]).
    at: String,
}

/// A target ([`Delivery::target`]) in a trader's words, after "delivered": "on paper" or "to URL".
pub fn where_to(target: &str) -> String {
    if target == PAPER_TARGET {
        "on paper".to_owned()
    } else {
        format!("to {target}")
    }
}

/// Every bot's delivery, by bot id.
#[derive(Debug, Clone, Default)]
pub struct Bots {
    by_id: HashMap<String, Delivery>,
    /// Whether these came from a bots file: without one every bot is on paper by design (the demo); with one, a
    /// bot it does not list is more likely a key mistyped than a bot meant for paper ([`Bots::unlisted`]).
    given: bool,
}

impl Bots {
    /// Reads `--bots FILE`; secrets are resolved now, so a missing one stops the start rather than an order.
    /// `data_dir` keeps the refresh tokens a broker rotates.
    pub fn load(path: &Path, data_dir: &Path) -> Result<Bots, String> {
        let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Bots::from_json(&text, data_dir).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses the bots file's content.
    pub fn from_json(text: &[u8], data_dir: &Path) -> Result<Bots, String> {
        let entries: HashMap<String, Entry> = serde_json::from_slice(without_bom(text)).map_err(without_values)?;
        let mut by_id = HashMap::new();
        for (id, entry) in entries {
            let delivery = match entry {
                Entry::Paper {} => Delivery::Paper,
                Entry::Http(h) => {
                    let HttpEntry { base_url, auth, headers, timeout_ms, sync_interval_secs, settle_ms } = *h;
                    let mut bot = parse_base_url(&base_url).map_err(|e| format!("bot {id}: {e}"))?;
                    let auth = auth.map(read_auth).transpose().map_err(|e| format!("bot {id} auth: {e}"))?;
                    let mut fixed = Vec::new();
                    for (name, source) in headers {
                        let v = source.resolve(&format!("bot {id} header {name}"))?;
                        fixed.push((name, v));
                    }
                    let mut credentials: Vec<(String, String)> =
                        fixed.iter().map(|(n, v)| (format!("header {}", n.to_ascii_lowercase()), v.clone())).collect();
                    if let Some(auth) = &auth {
                        credentials.extend(auth.credentials(&id)?);
                    }
                    if let Some(keys) = fingerprint(credentials) {
                        bot.target = format!("{}{KEYS_MARK}{keys})", bot.target);
                    }
                    bot.timeout = Duration::from_millis(timeout_ms.unwrap_or(10_000).max(1));
                    bot.sync_interval = Duration::from_secs(sync_interval_secs.unwrap_or(30).max(1));
                    bot.settle = Duration::from_millis(settle_ms.unwrap_or(DEFAULT_SETTLE_MS));
                    bot.session = Arc::new(session::build(&id, auth, fixed, bot.timeout, data_dir)?);
                    Delivery::Http(bot)
                }
            };
            by_id.insert(id, delivery);
        }
        Ok(Bots { by_id, given: true })
    }

    /// Whether any bot's broker, or its token endpoint, is reached over https.
    pub fn any_tls(&self) -> bool {
        self.by_id.values().any(|d| matches!(d, Delivery::Http(h) if h.tls || h.session.token_url_tls()))
    }

    /// Every bot delivered over http.
    pub fn http(&self) -> impl Iterator<Item = &HttpBot> {
        self.by_id.values().filter_map(|d| match d {
            Delivery::Http(h) => Some(h),
            Delivery::Paper => None,
        })
    }

    /// A bot's delivery: `paper` unless the file says otherwise.
    pub fn delivery(&self, bot: &str) -> Delivery {
        self.get(bot).clone()
    }

    /// A bot's delivery, borrowed: `paper` unless the file says otherwise.
    pub fn get(&self, bot: &str) -> &Delivery {
        static PAPER: Delivery = Delivery::Paper;
        self.by_id.get(bot).unwrap_or(&PAPER)
    }

    /// Where a bot's rows go now ([`Delivery::target`]).
    pub fn target(&self, bot: &str) -> &str {
        self.get(bot).target()
    }

    /// The account `bot` (a strategy's bot, configured at `broker` with `account_id`) trades: `None` on paper,
    /// where each bot of each strategy has a simulated book of its own.
    pub fn account(&self, bot: &str, broker: strategy_webhook::broker::BrokerId, account_id: &str) -> Option<Account> {
        let Delivery::Http(h) = self.get(bot) else { return None };
        let at = if broker.broker().names_account() {
            format!("{} {}", split_target(h.target()).0, account_id.trim())
        } else {
            h.target().to_owned()
        };
        Some(Account { broker, at })
    }

    /// Whether a bots file was given and does not list `bot`, which is then delivered on paper: what a key
    /// mistyped in the file looks like (`alp-lvie` for `alp-live`), its alerts answered `processed` and filled
    /// on paper while the account never trades, so it is said at every load of the bot's strategy.
    pub fn unlisted(&self, bot: &str) -> bool {
        self.given && !self.by_id.contains_key(bot)
    }

    /// The file's entries that no bot in `in_use` has, in name order: the other half of a mistyped key.
    pub fn unused<'a>(&'a self, in_use: &std::collections::HashSet<&str>) -> Vec<&'a str> {
        let mut out: Vec<&str> = self.by_id.keys().map(String::as_str).filter(|id| !in_use.contains(id)).collect();
        out.sort_unstable();
        out
    }
}

/// An `auth` object: without `type` it is the single secret header of earlier versions.
fn read_auth(mut v: serde_json::Value) -> Result<AuthConfig, String> {
    if let Some(o) = v.as_object_mut() {
        o.entry("type").or_insert_with(|| "header".into());
    }
    serde_json::from_value(v).map_err(without_values)
}

/// A file's bytes without one leading UTF-8 byte order mark: Windows Notepad and PowerShell 5 write it, and serde
/// refused such a file ("expected value at line 1 column 1"), stopping the start for a file that reads right.
pub(crate) fn without_bom(text: &[u8]) -> &[u8] {
    text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text)
}

/// serde's message without the values it quotes: a secret written as a bare string where `{"env"|"file"|"value":
/// …}` belongs (`"client_secret": "abc…"`) was printed whole in the start-up error, to stderr and the journal.
pub(crate) fn without_values(e: serde_json::Error) -> String {
    let text = e.to_string();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        // serde quotes a value of the wrong type in backticks (`invalid type: integer `12345678``): left out
        // too, a key or an account number may be one. Names in backticks (an unknown variant or field) stay.
        let value_follows = ["integer ", "floating point ", "boolean ", "character "].iter().any(|t| out.ends_with(t));
        if c == '`' && value_follows {
            out.push_str("`…`");
            for c in chars.by_ref() {
                if c == '`' {
                    break;
                }
            }
            continue;
        }
        if c != '"' {
            out.push(c);
            continue;
        }
        // A quoted value (Rust's debug quoting: `\"` inside does not end it) is left out.
        out.push_str("\"…\"");
        let mut escaped = false;
        for c in chars.by_ref() {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => break,
                _ => {}
            }
        }
    }
    if text.contains("expected struct Source") {
        out.push_str(" (a header or secret is an object: {\"env\": NAME}, {\"file\": PATH} or {\"value\": TEXT})");
    }
    out
}

/// The host a base URL names, as an error may show it: after the last `@` (a user and password before it may
/// hold `/`, `?` or `#`), up to its path, query or fragment.
fn shown_host(rest: &str) -> &str {
    let after = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    after.split(['/', '?', '#']).next().unwrap_or_default()
}

/// A base URL as an error may show it: its scheme and host only, never what precedes an `@` anywhere in it,
/// nor its path, query or fragment (any of which may hold a key).
fn redacted(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let hidden = if rest.contains('@') { "…@" } else { "" };
    let host = shown_host(rest);
    if scheme.is_empty() {
        format!("{:?}", format!("{hidden}{host}"))
    } else {
        format!("{:?}", format!("{scheme}://{hidden}{host}"))
    }
}

/// Whether `host` (brackets removed) is this machine: `localhost`, 127.0.0.0/8 or `::1`, the only hosts a bot's
/// broker or token endpoint may be reached at over plain `http://` (a local proxy, a test's mock). Anywhere else
/// the bot's keys, bearer token or OAuth client secret and refresh token would cross the network in clear text.
pub(crate) fn loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Splits `https://host:port/prefix` into its parts.
fn parse_base_url(url: &str) -> Result<HttpBot, String> {
    let shown = redacted(url);
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!("base_url {shown} must start with https:// or http:// (in lower case)"));
    };
    let (authority, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let scheme = if tls { "https" } else { "http" };
    // Checked first, on the whole URL: a password may hold `/`, `?` or `#`, which would end the authority early.
    if rest.contains('@') {
        // A user and password in the URL would be copied wherever the URL goes: log rows, the outbox, the Logs
        // view. The error names only the host after the `@`, never what comes before it.
        return Err(format!(
            "base_url must not hold credentials (user:password@); put them in \"auth\" or \"headers\" with \
             {{\"env\": …}} or {{\"file\": …}} (see docs/server.md, Bots) and give the base_url as {scheme}://{}",
            shown_host(rest)
        ));
    }
    if let Some(i) = rest.find(['?', '#']) {
        // The broker's paths are put after the base URL, so a query or fragment there would end up inside
        // every request's path. What it held (often a key) is not repeated.
        return Err(format!(
            "base_url must not hold a query or fragment ({}…); put keys in \"auth\" or \"headers\" (see \
             docs/server.md, Bots) and give the base_url as {}://{}",
            &rest[i..i + 1],
            scheme,
            shown_host(rest)
        ));
    }
    let default_port = if tls { 443 } else { 80 };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && !p.contains(']') => {
            (h.to_owned(), p.parse::<u16>().map_err(|_| format!("base_url {shown} has a bad port"))?)
        }
        _ => (authority.to_owned(), default_port),
    };
    if host.is_empty() {
        return Err(format!("base_url {shown} has no host"));
    }
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    if !tls && !loopback(&host) {
        return Err(format!(
            "base_url {shown}: http:// would send the bot's keys and orders in clear text to another machine; give \
             https://, or http:// only to this machine (127.0.0.1, ::1, localhost: a local proxy, a test)"
        ));
    }
    let target = uri(tls, &host.to_ascii_lowercase(), port, prefix);
    Ok(HttpBot {
        tls,
        host,
        port,
        prefix: prefix.to_owned(),
        target,
        session: Arc::new(Session::fixed("", Vec::new())),
        timeout: Duration::from_secs(10),
        sync_interval: Duration::from_secs(30),
        settle: Duration::from_millis(DEFAULT_SETTLE_MS),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret written as a bare string where a source object belongs is refused without being printed.
    #[test]
    fn a_secret_written_as_a_plain_string_is_not_in_the_error() {
        let http = |extra: serde_json::Value| {
            let mut b = serde_json::json!({ "delivery": "http", "base_url": "https://broker.example" });
            for (k, v) in extra.as_object().unwrap() {
                b[k] = v.clone();
            }
            serde_json::json!({ "b": b }).to_string()
        };
        for file in [
            http(serde_json::json!({ "headers": { "APCA-API-SECRET-KEY": "S3CRET-one" } })),
            http(serde_json::json!({ "headers": { "K": "S3\"CRET-quoted" } })),
            http(serde_json::json!({ "auth": { "type": "oauth2", "token_url": "https://x.example/token",
                                               "client_secret": "S3CRET-two", "refresh_token": { "env": "R" } } })),
            http(serde_json::json!({ "auth": "Bearer S3CRET-three" })),
            http(serde_json::json!({ "auth": { "type": "jwt_es256", "key_name": { "value": "k" },
                                               "private_key": "-----BEGIN EC PRIVATE KEY-----S3CRET" } })),
        ] {
            let Err(e) = Bots::from_json(file.as_bytes(), Path::new("/nonexistent")) else {
                panic!("{file} was taken")
            };
            assert!(!e.contains("S3CRET") && !e.contains("CRET"), "{e}");
            assert!(e.contains("invalid type") || e.contains("expected"), "{e}");
        }
        let Err(e) =
            Bots::from_json(http(serde_json::json!({ "headers": { "K": "S3CRET" } })).as_bytes(), Path::new("/x"))
        else {
            panic!("taken")
        };
        assert!(e.contains(r#"{"env": NAME}"#), "the error says what a secret looks like: {e}");
    }

    /// A bot at a broker on the internet given as `http://` (a typo, or a copy of a sandbox line)
    /// was taken, and its API keys, bearer token or OAuth client secret and refresh token then crossed the
    /// internet in clear text with every request. `http://` is meant for tests and local proxies (docs/server.md):
    /// a host that is not on the loopback is refused at start.
    #[test]
    fn credentials_over_plain_http_to_a_remote_host_are_refused() {
        let keys = serde_json::json!({ "b": { "delivery": "http", "base_url": "http://api.broker.example",
            "headers": { "APCA-API-KEY-ID": { "value": "id" }, "APCA-API-SECRET-KEY": { "value": "S3CRET" } } } });
        assert!(
            Bots::from_json(keys.to_string().as_bytes(), Path::new("/nonexistent")).is_err(),
            "API keys are sent in clear text to api.broker.example"
        );
        let dir = std::env::temp_dir().join(format!("swh-plain-http-{}", std::process::id()));
        let oauth = serde_json::json!({ "b": { "delivery": "http", "base_url": "https://api.broker.example",
            "auth": { "type": "oauth2", "token_url": "http://api.broker.example/v1/oauth/token",
                      "client_id": { "value": "app" }, "client_secret": { "value": "S3CRET" },
                      "refresh_token": { "value": "R3FRESH" } } } });
        let got = Bots::from_json(oauth.to_string().as_bytes(), &dir);
        let _ = std::fs::remove_dir_all(&dir);
        let e = got.expect_err("the client secret and refresh token are sent in clear text to api.broker.example");
        assert!(e.contains("token_url") && !e.contains("S3CRET") && !e.contains("R3FRESH"), "names the setting: {e}");
        let keys = |url: &str| {
            let file = serde_json::json!({ "b": { "delivery": "http", "base_url": url,
                "headers": { "X-Key": { "value": "S3CRET" } } } });
            Bots::from_json(file.to_string().as_bytes(), Path::new("/nonexistent"))
        };
        let e = keys("http://10.0.0.5:8080").expect_err("a LAN address is not the loopback");
        assert!(e.contains("base_url") && !e.contains("S3CRET"), "names the setting: {e}");
        // The loopback (a local proxy, the tests' mocks) and https anywhere are taken.
        for url in [
            "http://127.0.0.1:8080",
            "http://127.8.9.10",
            "http://localhost:9000/v1",
            "http://[::1]:9000",
            "https://api.broker.example",
        ] {
            assert!(keys(url).is_ok(), "{url}: {:?}", keys(url).err());
        }
    }

    /// A bot given an `Authorization` header in `headers` and an `auth` that makes one too (a
    /// leftover bearer token beside a new OAuth setup) sent both on every request, and which one the broker reads
    /// is its choice: the start should refuse the pair, naming the header.
    #[test]
    fn two_authorization_headers_are_refused_at_start() {
        let file = serde_json::json!({ "b": { "delivery": "http", "base_url": "https://api.broker.example",
            "headers": { "Authorization": { "value": "Bearer OLD" } },
            "auth": { "header": "Authorization", "prefix": "Bearer ", "file": "/dev/null" } } });
        match Bots::from_json(file.to_string().as_bytes(), Path::new("/nonexistent")) {
            Err(e) => assert!(e.contains("`Authorization`") && !e.contains("OLD"), "names the header only: {e}"),
            Ok(b) => {
                let Delivery::Http(h) = b.delivery("b") else { panic!("not http") };
                let sent = headers_of(&h);
                let n = sent.iter().filter(|(n, _)| n.eq_ignore_ascii_case("authorization")).count();
                assert_eq!(n, 1, "sent on every request: {:?}", sent.iter().map(|(n, _)| n).collect::<Vec<_>>());
            }
        }
        // In another case, beside an OAuth session (whose bearer token is added to each request).
        let dir = std::env::temp_dir().join(format!("swh-two-auth-{}", std::process::id()));
        let oauth = serde_json::json!({ "b": { "delivery": "http", "base_url": "https://api.broker.example",
            "headers": { "authorization": { "value": "Bearer OLD" } },
            "auth": { "type": "oauth2", "token_url": "https://api.broker.example/v1/oauth/token",
                      "client_secret": { "value": "S3CRET" }, "refresh_token": { "value": "R3FRESH" } } } });
        let got = Bots::from_json(oauth.to_string().as_bytes(), &dir);
        let _ = std::fs::remove_dir_all(&dir);
        let e = got.expect_err("an Authorization header beside an OAuth session is refused");
        assert!(e.contains("`authorization`") && !e.contains("OLD"), "names the header only: {e}");
        // One header twice in `headers`, in two cases.
        let twice = serde_json::json!({ "b": { "delivery": "http", "base_url": "https://api.broker.example",
            "headers": { "X-Api-Key": { "value": "k1" }, "x-api-key": { "value": "k2" } } } });
        let e = Bots::from_json(twice.to_string().as_bytes(), Path::new("/nonexistent")).expect_err("sent twice");
        assert!(e.contains("given twice") && !e.contains("k1") && !e.contains("k2"), "{e}");
        // Other headers beside an `auth` stay allowed.
        let fine = serde_json::json!({ "b": { "delivery": "http", "base_url": "https://api.broker.example",
            "headers": { "X-Api-Key": { "value": "k" } },
            "auth": { "header": "X-Api-Secret", "file": "/dev/null" } } });
        assert!(Bots::from_json(fine.to_string().as_bytes(), Path::new("/nonexistent")).is_ok());
    }

    /// The headers a bot's session gives a request.
    fn headers_of(h: &HttpBot) -> Vec<(String, String)> {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(h.session.headers("GET", "x.example", "/v1")).unwrap()
    }

    fn target_of(base_url: &str) -> String {
        let file = serde_json::json!({ "b": { "delivery": "http", "base_url": base_url } }).to_string();
        Bots::from_json(file.as_bytes(), Path::new("/nonexistent")).unwrap().target("b").to_owned()
    }

    #[test]
    fn a_query_or_fragment_in_a_base_url_is_refused_without_being_repeated() {
        // It would sit inside every request's path (`/v2?key=abc/v2/orders`), and the old target left it out,
        // so two base URLs that differ only there were one target.
        for url in [
            "https://api.example.com/v2?key=S3CRET",
            "https://api.example.com?key=S3CRET",
            "https://api.example.com/v2#S3CRET",
        ] {
            let file = serde_json::json!({ "b": { "delivery": "http", "base_url": url } }).to_string();
            let e = Bots::from_json(file.as_bytes(), Path::new("/nonexistent")).unwrap_err();
            assert!(e.contains("must not hold a query or fragment"), "{e}");
            assert!(e.contains("https://api.example.com"), "{e}");
            assert!(!e.contains("S3CRET"), "{e}");
        }
    }

    /// Without a bots file every bot is on paper and nothing is amiss; with one, a bot it does not list and an
    /// entry no bot has are the two halves of a mistyped key.
    #[test]
    fn a_bots_file_tells_its_unlisted_bots_and_unused_entries() {
        let none = Bots::default();
        assert!(!none.unlisted("alp-live"), "without a bots file, paper is the rule, not a mistake");
        assert!(none.unused(&["alp-live"].into()).is_empty());
        let file =
            br#"{"alp-lvie": {"delivery": "http", "base_url": "http://127.0.0.1:9"}, "demo": {"delivery": "paper"}}"#;
        let bots = Bots::from_json(file, Path::new("/nonexistent")).unwrap();
        assert!(bots.unlisted("alp-live"));
        assert!(!bots.unlisted("alp-lvie") && !bots.unlisted("demo"));
        assert_eq!(bots.delivery("alp-live").target(), PAPER_TARGET, "an unlisted bot is still paper");
        assert_eq!(bots.unused(&["alp-live", "demo"].into()), ["alp-lvie"]);
        assert_eq!(bots.unused(&Default::default()), ["alp-lvie", "demo"]);
    }

    #[test]
    fn a_target_has_one_canonical_form() {
        assert_eq!(Bots::default().delivery("anyone").target(), PAPER_TARGET, "a bot not listed is paper");
        let paper = br#"{"b": {"delivery": "paper"}}"#;
        assert_eq!(Bots::from_json(paper, Path::new("/nonexistent")).unwrap().delivery("b").target(), "paper");
        // The default port is written out, the host is lower case, a trailing slash goes.
        assert_eq!(target_of("https://api.example.com"), "https://api.example.com:443");
        assert_eq!(target_of("https://API.Example.com:443/"), "https://api.example.com:443");
        assert_eq!(target_of("http://127.0.0.1"), "http://127.0.0.1:80");
        assert_eq!(target_of("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
        // The path prefix is part of it, its case kept (paths are case-sensitive).
        assert_eq!(target_of("https://api.example.com/v2"), "https://api.example.com:443/v2");
        assert_eq!(target_of("https://api.example.com:8443/V2/"), "https://api.example.com:8443/V2");
        assert_eq!(target_of("http://[::1]:9000/p"), "http://[::1]:9000/p");
        // Two endpoints of one broker (its paper and its live account) are two targets, as are two schemes.
        assert_ne!(target_of("https://paper-api.example.com"), target_of("https://api.example.com"));
        assert_ne!(target_of("http://localhost:8443"), target_of("https://localhost:8443"));
        assert_eq!(where_to("paper"), "on paper");
        assert_eq!(where_to("https://api.example.com:443"), "to https://api.example.com:443");
    }

    /// The keys' fingerprint: the same keys give the same target however they are read (a value, an
    /// environment variable, a file; header names in any case, in any order), other keys another; it never
    /// holds the secret.
    #[test]
    fn a_target_carries_a_fingerprint_of_the_credentials_as_read() {
        let dir = std::env::temp_dir().join(format!("swh-bots-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (var, path) = (format!("SWH_TEST_KEY_{}", std::process::id()), dir.join("secret"));
        std::env::set_var(&var, "S3CRET-A\n");
        std::fs::write(&path, "S3CRET-A\n").unwrap();
        let target = |headers: serde_json::Value| {
            let file = serde_json::json!({ "b": { "delivery": "http", "base_url": "https://api.example.com/v2",
                                                  "headers": headers } });
            Bots::from_json(file.to_string().as_bytes(), &dir).unwrap().target("b").to_owned()
        };
        let by_value = target(serde_json::json!({ "K-ID": { "value": "A" }, "K-SECRET": { "value": "S3CRET-A" } }));
        assert!(by_value.starts_with("https://api.example.com:443/v2 (keys "), "{by_value}");
        assert!(by_value.ends_with(')') && !by_value.contains("S3CRET"), "{by_value}");
        assert_eq!(target(serde_json::json!({ "K-ID": { "value": "A" }, "K-SECRET": { "env": var } })), by_value);
        let by_file = target(serde_json::json!({ "k-secret": { "file": path }, "k-id": { "value": "A" } }));
        assert_eq!(by_file, by_value);
        assert_ne!(
            target(serde_json::json!({ "K-ID": { "value": "B" }, "K-SECRET": { "value": "S3CRET-A" } })),
            by_value
        );
        // A value moved from one header into the other is other keys.
        assert_ne!(
            target(serde_json::json!({ "K-ID": { "value": "AS" }, "K-SECRET": { "value": "3CRET-A" } })),
            by_value
        );
        // So are an `auth`'s secrets.
        let auth = |file: &std::path::Path| {
            let f = serde_json::json!({ "b": { "delivery": "http", "base_url": "https://api.example.com/v2",
                "auth": { "header": "Authorization", "prefix": "Bearer ", "file": file } } });
            Bots::from_json(f.to_string().as_bytes(), &dir).unwrap().target("b").to_owned()
        };
        let before = auth(&path);
        std::fs::write(&path, "S3CRET-B").unwrap();
        assert_ne!(auth(&path), before);
        assert!(before.starts_with("https://api.example.com:443/v2 (keys ") && !before.contains("S3CRET"));
        std::env::remove_var(&var);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A signing key is fingerprinted as it signs: the same key written with `\n` spelled out (an env value), with
    /// CRLF line ends, or in a file is the same account's, and a row stored under one is sent under another;
    /// another key is not.
    #[test]
    fn one_signing_key_written_several_ways_gives_one_target() {
        use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
        let dir = std::env::temp_dir().join(format!("swh-bots-jwt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rng = ring::rand::SystemRandom::new();
        let pem_of = |der: Vec<u8>| {
            pem::encode_config(
                &pem::Pem::new("PRIVATE KEY", der),
                pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
            )
        };
        let key =
            pem_of(EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap().as_ref().to_vec());
        let other =
            pem_of(EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap().as_ref().to_vec());
        let (lf, crlf, another) = (dir.join("lf.pem"), dir.join("crlf.pem"), dir.join("other.pem"));
        std::fs::write(&lf, &key).unwrap();
        std::fs::write(&crlf, key.replace('\n', "\r\n")).unwrap();
        std::fs::write(&another, &other).unwrap();
        let var = format!("SWH_TEST_JWT_KEY_{}", std::process::id());
        std::env::set_var(&var, key.trim_end().replace('\n', "\\n"));
        let target = |private_key: serde_json::Value| {
            let f = serde_json::json!({ "c": { "delivery": "http", "base_url": "https://api.example.com",
                "auth": { "type": "jwt_es256", "key_name": { "value": "organizations/o/apiKeys/k" },
                          "private_key": private_key } } });
            Bots::from_json(f.to_string().as_bytes(), &dir).expect("the key is accepted").target("c").to_owned()
        };
        let by_file = target(serde_json::json!({ "file": lf }));
        let by_env = target(serde_json::json!({ "env": var }));
        let by_crlf = target(serde_json::json!({ "file": crlf }));
        let by_other = target(serde_json::json!({ "file": another }));
        std::env::remove_var(&var);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(by_file.contains(" (keys "), "{by_file}");
        assert!(!stored_elsewhere(Some(&by_env), &by_file, true), "{by_env} against {by_file}");
        assert!(!stored_elsewhere(Some(&by_crlf), &by_file, true), "{by_crlf} against {by_file}");
        assert!(stored_elsewhere(Some(&by_other), &by_file, true), "another key is another account's");
    }

    #[test]
    fn other_keys_are_elsewhere_only_where_they_pick_the_account() {
        let (url, a, b) = (
            "https://api.example.com:443",
            "https://api.example.com:443 (keys 0123456789ab)",
            "https://api.example.com:443 (keys ba9876543210)",
        );
        assert!(stored_elsewhere(Some(a), b, true), "another account's keys");
        assert!(!stored_elsewhere(Some(a), a, true));
        assert!(!stored_elsewhere(Some(a), b, false), "the path names the account: checked there");
        assert!(stored_elsewhere(Some(a), url, true), "the keys taken out");
        // Stored by a version before fingerprints: the URL alone decides, as it did.
        assert!(!stored_elsewhere(Some(url), a, true));
        assert!(stored_elsewhere(Some(url), "https://paper-api.example.com:443 (keys 0123456789ab)", true));
        assert!(stored_elsewhere(Some(a), "https://paper-api.example.com:443 (keys 0123456789ab)", false));
        assert!(!stored_elsewhere(None, a, true), "no target: delivered as configured");
        assert!(stored_elsewhere(Some(PAPER_TARGET), a, false) && stored_elsewhere(Some(a), PAPER_TARGET, false));
        assert!(keys_pick_account("no-such-broker"), "an unknown broker is taken to name no account");
    }

    #[test]
    fn no_error_about_a_bots_file_repeats_a_secret() {
        for url in [
            "HTTPS://alice:S3CRET@broker.example",
            "https://alice:S3/CRET@broker.example",
            "https://alice:S3CRET@broker.example:99999",
            "ftp://alice:S3CRET@broker.example",
            "https://alice:S3?CRET@broker.example",
            "HTTPS://alice:S3#CRET@broker.example",
            "https://alice:S3#CRET@broker.example/v2",
        ] {
            let file = serde_json::json!({ "b": { "delivery": "http", "base_url": url } }).to_string();
            let e = Bots::from_json(file.as_bytes(), Path::new("/nonexistent")).unwrap_err();
            assert!(!e.contains("S3") && !e.contains("CRET") && !e.contains("alice"), "{url}: {e}");
            assert!(e.contains("broker.example"), "{url}: {e}");
        }
        let file = br#"{"b": {"delivery": "http", "base_url": "https://x.example",
                       "headers": {"APCA-API-SECRET-KEY": 12345678}}}"#;
        let e = Bots::from_json(file, Path::new("/nonexistent")).unwrap_err();
        assert!(!e.contains("12345678") && e.contains("invalid type"), "{e}");
    }

    #[test]
    fn credentials_in_a_base_url_are_refused_without_being_repeated() {
        let file = br#"{"b": {"delivery": "http", "base_url": "https://alice:S3CRET@broker.example/v2"}}"#;
        let e = Bots::from_json(file, Path::new("/nonexistent")).unwrap_err();
        assert!(e.contains("must not hold credentials") && e.contains("\"auth\""), "{e}");
        assert!(e.contains("https://broker.example"), "{e}");
        assert!(!e.contains("S3CRET") && !e.contains("alice"), "{e}");
        let ok = br#"{"b": {"delivery": "http", "base_url": "https://broker.example/v2"}}"#;
        assert!(Bots::from_json(ok, Path::new("/nonexistent")).is_ok());
    }

    #[test]
    fn a_header_that_cannot_be_sent_stops_the_start_and_an_env_secret_loses_its_newline() {
        // Before, each of these passed the start and every request then failed to build: the rows expired
        // unsent, entries and exits alike.
        let var = format!("SWH_TEST_SECRET_{}", std::process::id());
        std::env::set_var(&var, "S3CRET\n");
        let file = format!(
            r#"{{"b": {{"delivery": "http", "base_url": "https://x.example",
            "auth": {{"header": "Authorization", "prefix": "Bearer ", "env": "{var}"}}}}}}"#
        );
        let bots = Bots::from_json(file.as_bytes(), Path::new("/nonexistent")).unwrap();
        let Delivery::Http(h) = bots.delivery("b") else { panic!("not http") };
        let headers = headers_of(&h);
        assert_eq!(headers, [("Authorization".to_owned(), "Bearer S3CRET".to_owned())]);
        std::env::remove_var(&var);

        let http = |headers: serde_json::Value| {
            serde_json::json!({ "b": { "delivery": "http", "base_url": "https://x.example", "headers": headers } })
                .to_string()
        };
        let e = Bots::from_json(
            http(serde_json::json!({ "APCA-API-KEY-ID ": { "value": "k" } })).as_bytes(),
            Path::new("/x"),
        )
        .unwrap_err();
        assert!(e.contains("`APCA-API-KEY-ID `") && e.contains("not a valid header name"), "{e}");
        let e = Bots::from_json(http(serde_json::json!({ "K": { "value": "S3\nCRET" } })).as_bytes(), Path::new("/x"))
            .unwrap_err();
        assert!(e.contains("header `K`") && e.contains("cannot be sent") && !e.contains("CRET"), "{e}");
    }

    #[test]
    fn auth_reads_in_each_shape_and_its_errors_never_show_a_secret() {
        let dir = std::env::temp_dir().join(format!("swh-bots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("secret");
        std::fs::write(&secret, "S3CRET\n").unwrap();
        let s = secret.display();
        let legacy = format!(
            r#"{{"b": {{"delivery": "http", "base_url": "https://x.example",
            "auth": {{"header": "Authorization", "prefix": "Bearer ", "file": "{s}"}}, "sync_interval_secs": 5}}}}"#
        );
        let bots = Bots::from_json(legacy.as_bytes(), &dir).unwrap();
        let Delivery::Http(h) = bots.delivery("b") else { panic!("not http") };
        assert_eq!(h.sync_interval, Duration::from_secs(5));
        let headers = headers_of(&h);
        assert_eq!(headers, [("Authorization".to_owned(), "Bearer S3CRET".to_owned())]);
        assert!(!format!("{h:?}").contains("S3CRET"), "a bot's Debug shows no secret");

        let oauth = format!(
            r#"{{"b": {{"delivery": "http", "base_url": "https://x.example",
            "auth": {{"type": "oauth2", "token_url": "https://x.example/oauth/token", "client_secret": {{"file": "{s}"}},
                      "refresh_token": {{"file": "{s}"}}, "client_auth": "body", "body": "json"}}}}}}"#
        );
        assert!(Bots::from_json(oauth.as_bytes(), &dir).is_ok());
        let bad_key = format!(
            r#"{{"b": {{"delivery": "http", "base_url": "https://x.example",
            "auth": {{"type": "jwt_es256", "key_name": {{"value": "k"}}, "private_key": {{"file": "{s}"}}}}}}}}"#
        );
        let e = Bots::from_json(bad_key.as_bytes(), &dir).unwrap_err();
        assert!(e.contains("private_key") && !e.contains("S3CRET"), "{e}");
        let unknown = br#"{"b": {"delivery": "http", "base_url": "https://x.example", "auth": {"type": "magic"}}}"#;
        assert!(Bots::from_json(unknown, &dir).unwrap_err().contains("magic"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
