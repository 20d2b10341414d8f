//! How an http bot authenticates: one [`Session`] per bot, asked for the headers of every request.
//!
//! Three schemes, configured under the bot's `auth` in the bots file (docs/server.md shows each broker's):
//!
//! - static headers (an API key pair, a long-lived bearer token): the same headers on every request;
//! - OAuth2 refresh: an access token minted from a refresh token at the broker's token endpoint, renewed shortly
//!   before it expires and after a 401. A refresh token the endpoint hands back replaces the old one and is kept
//!   in a 0600 file in the data directory, so a restart does not fall back to a token the broker has retired.
//!   When the endpoint refuses the refresh token (it expired, or was revoked), the session stops: every request
//!   of the bot fails with that message until a new token is configured and the server restarted;
//! - a JWT signed with ES256 for each request, from a key name and an EC private key (PEM).
//!
//! Secrets come from the environment or files; none is ever logged.

use crate::bots::Source;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::rand::SecureRandom as _;
use ring::signature::{EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde::Deserialize;
use sha2::Digest as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Why a session cannot give the headers of a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The bot is stopped: its credentials were refused for good (an expired refresh token). Retrying cannot
    /// help; the trader must log in again.
    #[error("{0}")]
    Stopped(String),
    /// The token endpoint could not be reached or answered an error that may pass: try again later.
    #[error("{0}")]
    Unavailable(String),
}

impl SessionError {
    /// True when retrying cannot help.
    pub fn is_stopped(&self) -> bool {
        matches!(self, SessionError::Stopped(_))
    }
}

/// One http bot's authentication.
pub struct Session {
    bot: String,
    /// Headers sent with every request whatever the scheme (a `User-Agent`, static keys).
    fixed: Vec<(String, String)>,
    scheme: Scheme,
}

impl std::fmt::Debug for Session {
    // Never prints a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = match &self.scheme {
            Scheme::Static => "static",
            Scheme::OAuth(_) => "oauth2",
            Scheme::Jwt(_) => "jwt_es256",
        };
        f.debug_struct("Session").field("bot", &self.bot).field("scheme", &scheme).finish_non_exhaustive()
    }
}

enum Scheme {
    Static,
    // Shared with the renewal it runs in a task of its own.
    OAuth(std::sync::Arc<OAuth>),
    Jwt(Box<Jwt>),
}

impl Session {
    /// A session that sends only `headers` (the secrets already resolved).
    pub fn fixed(bot: &str, headers: Vec<(String, String)>) -> Session {
        Session { bot: bot.to_owned(), fixed: headers, scheme: Scheme::Static }
    }

    /// All the authentication headers of one request (`method`, `authority` as in the Host header, `path`
    /// with its query), refreshing an access token first when it is about to expire.
    pub async fn headers(
        &self,
        method: &str,
        authority: &str,
        path: &str,
    ) -> Result<Vec<(String, String)>, SessionError> {
        let mut out = self.fixed.clone();
        match &self.scheme {
            Scheme::Static => {}
            Scheme::OAuth(o) => out.push(("Authorization".into(), format!("Bearer {}", o.access(&self.bot).await?))),
            Scheme::Jwt(j) => {
                out.push(("Authorization".into(), format!("Bearer {}", j.token(method, authority, path)?)))
            }
        }
        Ok(out)
    }

    /// Why the session is stopped (its refresh token refused for good), if it is.
    pub async fn stopped(&self) -> Option<String> {
        match &self.scheme {
            Scheme::OAuth(o) => o.state.lock().await.stopped.clone(),
            _ => None,
        }
    }

    /// Whether the session's token endpoint is reached over https (an http bot's OAuth may be).
    pub fn token_url_tls(&self) -> bool {
        matches!(&self.scheme, Scheme::OAuth(o) if o.url.tls)
    }

    /// The session's token endpoint and the timeout of its requests, for an OAuth session: its connections
    /// are pooled apart from the broker's (another host, often), so they count apart in the descriptor reserve.
    pub fn token_endpoint(&self) -> Option<(&crate::sync::Url, Duration)> {
        match &self.scheme {
            Scheme::OAuth(o) => Some((&o.url, o.timeout)),
            _ => None,
        }
    }

    /// When the configured refresh token ends (Unix ms): an OAuth session whose `refresh_token_lifetime_secs` is
    /// configured, counted from when this server first saw the token.
    pub fn refresh_token_ends_ms(&self) -> Option<i64> {
        match &self.scheme {
            Scheme::OAuth(o) => o.refresh_ends_ms(),
            _ => None,
        }
    }

    /// Called after the broker answered 401 to a request sent with `used` (its headers): the next request mints
    /// a new access token first, unless one was minted since that request's (by a request that got its 401
    /// first): throwing that away too would waste a refresh, and where the broker ends older tokens with each
    /// new grant, fail the other request's retry.
    pub async fn unauthorized(&self, used: &[(String, String)]) {
        if let Scheme::OAuth(o) = &self.scheme {
            let mut st = o.state.lock().await;
            let current = format!("Bearer {}", st.access);
            if used.iter().any(|(n, v)| n.eq_ignore_ascii_case("authorization") && *v == current) {
                st.expires_ms = 0;
            }
        }
    }
}

/// The `auth` object of an http bot, as the bots file gives it.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum AuthConfig {
    /// One header from a secret: `{"type": "header", "header": "Authorization", "prefix": "Bearer ", "env": …}`.
    Header(HeaderAuth),
    /// OAuth2 refresh-token grant.
    Oauth2(OAuthConfig),
    /// A per-request ES256 JWT.
    JwtEs256(JwtConfig),
}

impl AuthConfig {
    /// What this auth identifies the bot with, each value as read from its source (labelled, so that the
    /// same text under another field counts as another credential): what [`crate::bots`] fingerprints to tell
    /// one account's keys from another's. Read apart from [`build`], which keeps no copy of them all (an OAuth
    /// session holds the rotated refresh token, not the configured one).
    pub fn credentials(&self, bot: &str) -> Result<Vec<(String, String)>, String> {
        let read = |what: &str, source: &Source| source.resolve(&format!("bot {bot} auth {what}"));
        Ok(match self {
            AuthConfig::Header(h) => {
                let secret = Source::secret(h.env.clone(), h.file.clone()).resolve(&format!("bot {bot} auth"))?;
                vec![(format!("header {}", h.header.to_ascii_lowercase()), format!("{}{secret}", h.prefix))]
            }
            AuthConfig::Oauth2(c) => {
                let mut out = vec![("token_url".to_owned(), c.token_url.clone())];
                if let Some(id) = &c.client_id {
                    out.push(("client_id".to_owned(), read("client_id", id)?));
                }
                out.push(("client_secret".to_owned(), read("client_secret", &c.client_secret)?));
                out.push(("refresh_token".to_owned(), read("refresh_token", &c.refresh_token)?));
                out
            }
            AuthConfig::JwtEs256(c) => {
                // The key as it signs, not as it is written: one key in an env value with `\n` written out, in a
                // file with CRLF line ends, or in SEC1 or PKCS#8 form is one account's. Taken as text, each way
                // of writing it was other keys, and a server (or a peer on PostgreSQL) failed every row stored
                // under another. A key that does not read is taken as text (the session then refuses it).
                let pem = read("private_key", &c.private_key)?;
                let key = match ec_key(&pem.replace("\\n", "\n"), &ring::rand::SystemRandom::new()) {
                    Ok(k) => ("public_key", k.public_key().as_ref().iter().map(|b| format!("{b:02x}")).collect()),
                    Err(_) => ("private_key", pem),
                };
                vec![("key_name".to_owned(), read("key_name", &c.key_name)?), (key.0.to_owned(), key.1)]
            }
        })
    }
}

/// A single header whose value is a secret.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderAuth {
    #[serde(default = "authorization")]
    header: String,
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    env: Option<String>,
    #[serde(default)]
    file: Option<String>,
}

fn authorization() -> String {
    "Authorization".into()
}

/// How the client proves itself at the token endpoint.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    /// `Authorization: Basic base64(client_id:client_secret)`.
    Basic,
    /// `client_id` and `client_secret` in the request body.
    Body,
}

/// How the token request's body is written.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BodyFormat {
    /// `application/x-www-form-urlencoded`.
    Form,
    /// `application/json`.
    Json,
}

/// OAuth2 refresh-token grant.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    token_url: String,
    #[serde(default)]
    client_id: Option<Source>,
    client_secret: Source,
    refresh_token: Source,
    #[serde(default = "basic")]
    client_auth: ClientAuth,
    #[serde(default = "form")]
    body: BodyFormat,
    /// Seconds before an access token's expiry at which it is renewed (at most half its lifetime).
    #[serde(default = "margin")]
    refresh_margin_secs: u64,
    /// How long a refresh token lasts from the login that gave it (Schwab: 7 days, 604800), when the broker ends
    /// it whatever the renewals: the state sync warns a day before, so the trader logs in again before exits fail.
    #[serde(default)]
    refresh_token_lifetime_secs: Option<u64>,
}

fn basic() -> ClientAuth {
    ClientAuth::Basic
}
fn form() -> BodyFormat {
    BodyFormat::Form
}
fn margin() -> u64 {
    300
}

/// A per-request ES256 JWT.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    key_name: Source,
    private_key: Source,
    #[serde(default = "issuer")]
    issuer: String,
    #[serde(default = "lifetime")]
    lifetime_secs: u64,
}

fn issuer() -> String {
    "cdp".into()
}
fn lifetime() -> u64 {
    120
}

/// Builds a bot's session: `fixed` are its static headers, `timeout` bounds a token request, `data_dir` keeps
/// rotated refresh tokens.
pub fn build(
    bot: &str,
    auth: Option<AuthConfig>,
    mut fixed: Vec<(String, String)>,
    timeout: Duration,
    data_dir: &Path,
) -> Result<Session, String> {
    // A header in `headers` that `auth` makes too (a bearer token left beside a new OAuth setup) went out twice on
    // every request, and which one the broker reads is its choice: refused, naming the header (never its value).
    let made = match &auth {
        None => None,
        Some(AuthConfig::Header(h)) => Some(h.header.as_str()),
        Some(AuthConfig::Oauth2(_) | AuthConfig::JwtEs256(_)) => Some("Authorization"),
    };
    if let Some((name, _)) = made.and_then(|m| fixed.iter().find(|(n, _)| n.trim().eq_ignore_ascii_case(m.trim()))) {
        return Err(format!(
            "bot {bot}: header `{name}` is given in `headers` and made by `auth` too; the broker would get it twice: \
             keep one"
        ));
    }
    let scheme = match auth {
        None => Scheme::Static,
        Some(AuthConfig::Header(h)) => {
            let source = Source::secret(h.env, h.file);
            let secret = source.resolve(&format!("bot {bot} auth"))?;
            fixed.push((h.header, format!("{}{secret}", h.prefix)));
            Scheme::Static
        }
        Some(AuthConfig::Oauth2(c)) => {
            let agent = fixed.iter().find(|(n, _)| n.eq_ignore_ascii_case("user-agent")).map(|(_, v)| v.clone());
            Scheme::OAuth(std::sync::Arc::new(OAuth::new(bot, c, agent, timeout, data_dir)?))
        }
        Some(AuthConfig::JwtEs256(c)) => Scheme::Jwt(Box::new(Jwt::new(bot, c)?)),
    };
    // A header that can never be sent fails every request before it leaves; at start it stops the
    // server with the header's name (never its value) instead of each order expiring unsent.
    for (i, (name, value)) in fixed.iter().enumerate() {
        if fixed[..i].iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            return Err(format!(
                "bot {bot}: header `{name}` is given twice in `headers` (names are not case-sensitive)"
            ));
        }
        if hyper::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(format!("bot {bot}: header `{name}` is not a valid header name"));
        }
        if hyper::header::HeaderValue::from_str(value).is_err() {
            return Err(format!(
                "bot {bot}: the value of header `{name}` cannot be sent (a newline or another control character in it?)"
            ));
        }
    }
    Ok(Session { bot: bot.to_owned(), fixed, scheme })
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn sha256_hex(s: &str) -> String {
    sha2::Sha256::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

struct OAuth {
    url: crate::sync::Url,
    client_id: String,
    client_secret: String,
    client_auth: ClientAuth,
    body: BodyFormat,
    margin_ms: i64,
    timeout: Duration,
    /// The bot's own `User-Agent` header, sent to the token endpoint too: Tastytrade's refuses a request
    /// without one (401), which would stop the bot for good.
    user_agent: Option<String>,
    /// The 0600 file that keeps the current refresh token.
    file: PathBuf,
    state: tokio::sync::Mutex<TokenState>,
    /// What the last renewal came to (the access token it minted, or why there is none), sent to the requests
    /// waiting for it under the state's lock.
    renewed: tokio::sync::watch::Sender<Option<Result<String, SessionError>>>,
    /// The refresh token's lifetime from its login, where configured.
    refresh_lifetime_ms: Option<i64>,
    /// When this server first saw the configured refresh token (Unix ms).
    configured_at_ms: std::sync::atomic::AtomicI64,
}

#[derive(Default)]
struct TokenState {
    access: String,
    /// When the access token expires (Unix ms); 0 forces a refresh.
    expires_ms: i64,
    /// The access token's lifetime as last given, for the margin.
    lifetime_ms: i64,
    refresh: String,
    /// Why the session is stopped, once the refresh token was refused.
    stopped: Option<String>,
    /// Why an early renewal was refused for good while the access token in hand was still good: the session
    /// sends with that token until it expires, then stops for this reason.
    refused: Option<String>,
    /// After an early renewal failed (the endpoint down, the access token still good): not asked again before
    /// this moment (Unix ms), so that a hanging endpoint does not hold each request for its timeout.
    renew_after_ms: i64,
    /// A renewal is at the token endpoint: no other starts, and a request with no good token waits for it.
    renewing: bool,
}

/// How long a failed early renewal waits before the token endpoint is asked again, while the access token in hand
/// is still good.
const RENEW_RETRY_MS: i64 = 10_000;

/// Beyond a token request's timeout: writing the rotated refresh token down, and the task being scheduled.
const RENEWAL_SLACK: Duration = Duration::from_secs(2);

/// The OAuth renewals in flight in this process, so that a stop lets them finish (see [`finish_renewals`]).
static RENEWALS: std::sync::Mutex<Renewals> =
    std::sync::Mutex::new(Renewals { running: 0, closing: false, until: None });
/// Told each time a renewal ends.
static RENEWAL_ENDED: tokio::sync::Notify = tokio::sync::Notify::const_new();

struct Renewals {
    running: usize,
    /// The server is stopping: no renewal starts.
    closing: bool,
    /// When the last of the renewals running must have ended (its request's timeout, and the slack).
    until: Option<tokio::time::Instant>,
}

/// One renewal counted in [`RENEWALS`] for as long as it is held (its task's life, a task cut included).
struct Renewal;

impl Renewal {
    /// Counts a renewal whose request takes at most `timeout`; none while the server is stopping.
    fn begin(timeout: Duration) -> Option<Renewal> {
        let mut r = RENEWALS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if r.closing {
            return None;
        }
        r.running += 1;
        let until = tokio::time::Instant::now() + timeout + RENEWAL_SLACK;
        r.until = Some(r.until.map_or(until, |u| u.max(until)));
        Some(Renewal)
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        let mut r = RENEWALS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        r.running = r.running.saturating_sub(1);
        drop(r);
        RENEWAL_ENDED.notify_waiters();
    }
}

/// Called as the server stops, before its runtime ends (which would cut a renewal between the token endpoint
/// rotating the refresh token and the new one being written down: after the restart the bot holds a retired
/// token, is refused and stops until a new login). Lets the renewals in flight finish, for as long as their
/// requests may take, and starts no more. Returns whether all finished.
pub async fn finish_renewals() -> bool {
    loop {
        let ended = RENEWAL_ENDED.notified();
        tokio::pin!(ended);
        // Registered before the count is read, so that a renewal ending in between is not missed.
        ended.as_mut().enable();
        let until = {
            let mut r = RENEWALS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            r.closing = true;
            if r.running == 0 {
                return true;
            }
            r.until
        };
        let Some(until) = until else { return false };
        if tokio::time::timeout_at(until, ended).await.is_err() {
            return false;
        }
    }
}

/// Held by a renewal's task until it has said what came of it: dropped before (the task panicked, or was cut), it
/// ends the renewal. Otherwise the session stayed marked renewing, no renewal started again, and once the access
/// token ran out every request of the bot waited out its timeout, for good.
struct Unfinished(Option<std::sync::Arc<OAuth>>);

impl Unfinished {
    /// The renewal ended as it should: nothing left to do.
    fn ended(mut self) {
        self.0 = None;
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(oauth) = self.0.take() else { return };
        if let Ok(mut st) = oauth.state.try_lock() {
            oauth.end_unanswered(&mut st);
            return;
        }
        // A request holds the lock for a moment (it cannot be waited for in a drop). Still marked renewing, the
        // session starts no other renewal meanwhile, so this one's end cannot be taken for another's.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let mut st = oauth.state.lock().await;
                oauth.end_unanswered(&mut st);
            });
        }
    }
}

/// What the rotated-token file holds.
#[derive(serde::Serialize, Deserialize)]
struct Persisted {
    /// SHA-256 of the refresh token configured when this file was written: a new token in the configuration
    /// (after a new login) wins over the file.
    configured: String,
    refresh_token: String,
    /// When this server first saw the configured refresh token (Unix ms): the login it came from was no later.
    #[serde(default)]
    configured_at_ms: Option<i64>,
}

/// The token endpoint's answer.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    // `refresh_token` is read on its own ([`OAuth::refresh`]).
    #[serde(default, deserialize_with = "lenient_seconds")]
    expires_in: Option<u64>,
}

/// `expires_in` as token endpoints send it: RFC 6749 says a number of seconds; digits in a string and a fraction
/// are read too, and anything else as absent (the default lifetime). An odd member here failed the whole answer,
/// and with it the rotated refresh token the endpoint had just handed back and retired the old one for: the bot
/// then stopped at the next renewal until the trader logged in again.
fn lenient_seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let seconds = |f: f64| (f.is_finite() && f >= 0.0).then_some(f as u64);
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::Number(n) => n.as_u64().or_else(|| n.as_f64().and_then(seconds)),
        serde_json::Value::String(t) => {
            let t = t.trim();
            t.parse::<u64>().ok().or_else(|| t.parse::<f64>().ok().and_then(seconds))
        }
        _ => None,
    })
}

impl OAuth {
    fn new(
        bot: &str,
        c: OAuthConfig,
        user_agent: Option<String>,
        timeout: Duration,
        data_dir: &Path,
    ) -> Result<OAuth, String> {
        let url = crate::sync::Url::parse(&c.token_url).map_err(|e| format!("bot {bot} auth token_url: {e}"))?;
        if !url.tls && !crate::bots::loopback(&url.host) {
            return Err(format!(
                "bot {bot} auth token_url: http:// would send the client secret and refresh token in clear text to \
                 another machine; give https://, or http:// only to this machine (127.0.0.1, ::1, localhost)"
            ));
        }
        let client_id = match &c.client_id {
            Some(s) => s.resolve(&format!("bot {bot} auth client_id"))?,
            None => String::new(),
        };
        let client_secret = c.client_secret.resolve(&format!("bot {bot} auth client_secret"))?;
        let configured = c.refresh_token.resolve(&format!("bot {bot} auth refresh_token"))?;
        let file = data_dir.join("sessions").join(format!("{}.json", &sha256_hex(bot)[..32]));
        let refresh = match std::fs::read(&file).ok().and_then(|b| serde_json::from_slice::<Persisted>(&b).ok()) {
            Some(p) if p.configured == sha256_hex(&configured) && !p.refresh_token.is_empty() => p.refresh_token,
            _ => configured.clone(),
        };
        let oauth = OAuth {
            url,
            client_id,
            client_secret,
            client_auth: c.client_auth,
            body: c.body,
            margin_ms: i64::try_from(c.refresh_margin_secs.saturating_mul(1000)).unwrap_or(i64::MAX),
            timeout,
            user_agent,
            file,
            state: tokio::sync::Mutex::new(TokenState { refresh, ..TokenState::default() }),
            renewed: tokio::sync::watch::Sender::new(None),
            refresh_lifetime_ms: c
                .refresh_token_lifetime_secs
                .map(|s| i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)),
            configured_at_ms: std::sync::atomic::AtomicI64::new(0),
        };
        // The configured token's hash goes with every rotation written later.
        let seen = oauth.remember(&configured);
        oauth.configured_at_ms.store(seen, std::sync::atomic::Ordering::Relaxed);
        Ok(oauth)
    }

    /// When the configured refresh token ends (Unix ms), where its lifetime is configured.
    fn refresh_ends_ms(&self) -> Option<i64> {
        let seen = self.configured_at_ms.load(std::sync::atomic::Ordering::Relaxed);
        self.refresh_lifetime_ms.map(|l| seen.saturating_add(l))
    }

    /// Notes which configured token the file's rotations descend from (written once, at start), and returns
    /// when this server first saw it (now, for a new one, or a file of a version that did not keep it).
    fn remember(&self, configured: &str) -> i64 {
        let hash = sha256_hex(configured);
        let current = std::fs::read(&self.file).ok().and_then(|b| serde_json::from_slice::<Persisted>(&b).ok());
        let now = now_ms();
        let p = match current {
            Some(p) if p.configured == hash => match p.configured_at_ms {
                Some(at) => return at,
                None => Persisted { configured_at_ms: Some(now), ..p },
            },
            _ => Persisted { configured: hash, refresh_token: configured.to_owned(), configured_at_ms: Some(now) },
        };
        if let Err(e) = write_private(&self.file, &p) {
            tracing::warn!(error = %e, "cannot keep the session's refresh token in the data directory");
        }
        now
    }

    async fn access(self: &std::sync::Arc<Self>, bot: &str) -> Result<String, SessionError> {
        let mut st = self.state.lock().await;
        if let Some(why) = &st.stopped {
            return Err(SessionError::Stopped(why.clone()));
        }
        let margin = self.margin_ms.min(st.lifetime_ms / 2);
        let now = now_ms();
        let good = !st.access.is_empty() && now < st.expires_ms;
        if let Some(why) = st.refused.clone() {
            // Asking again would be refused again: the token in hand is all there is.
            if good {
                return Ok(st.access.clone());
            }
            tracing::error!(bot, error = %why, "the access token ran out: the bot is stopped");
            st.stopped = Some(why.clone());
            return Err(SessionError::Stopped(why));
        }
        if good && (now < st.expires_ms.saturating_sub(margin) || now < st.renew_after_ms || st.renewing) {
            return Ok(st.access.clone());
        }
        if !st.renewing {
            let Some(renewal) = Renewal::begin(self.timeout) else {
                // The server is stopping: a renewal now could be cut with the rotated token not written down.
                return if good {
                    Ok(st.access.clone())
                } else {
                    Err(SessionError::Unavailable("the server is stopping: the access token is not renewed".into()))
                };
            };
            st.renewing = true;
            // In a task of its own, not under the caller's lock: the requests of the bot that have a good token
            // go out with it meanwhile (an early renewal at a slow endpoint held each of them, market orders past
            // their deadline), and a caller dropped on the way (a delivery cut at shutdown) cannot cut the renewal
            // between the endpoint rotating the refresh token and the new one being written down.
            tokio::spawn(std::sync::Arc::clone(self).renew(bot.to_owned(), st.refresh.clone(), renewal));
        }
        // Early: the broker takes the token in hand until it expires.
        if good {
            return Ok(st.access.clone());
        }
        let mut renewed = self.renewed.subscribe();
        drop(st);
        // The renewal's own request is bounded by the timeout; this bound only guards against one that never ends.
        match tokio::time::timeout(self.timeout + RENEWAL_SLACK, renewed.changed()).await {
            Ok(Ok(())) => renewed.borrow_and_update().clone().unwrap_or_else(|| {
                Err(SessionError::Unavailable("the access token renewal ended without an answer".into()))
            }),
            _ => Err(SessionError::Unavailable("the access token renewal did not end in time".into())),
        }
    }

    /// One renewal at the token endpoint with `refresh`: the answer goes into the state, a rotated refresh token
    /// into the file, and what came of it to the requests waiting for it.
    async fn renew(self: std::sync::Arc<Self>, bot: String, refresh: String, _renewal: Renewal) {
        // Before the state's lock below, so that a panic under it drops that first.
        let unfinished = Unfinished(Some(std::sync::Arc::clone(&self)));
        let bot = bot.as_str();
        let (rotated, answer) = self.refresh(&refresh).await;
        #[cfg(test)]
        if bot == "renewal-panics-once" && tests::PANIC_ONCE.swap(false, std::sync::atomic::Ordering::SeqCst) {
            panic!("the test's renewal panics once");
        }
        let mut st = self.state.lock().await;
        let now = now_ms();
        let good = !st.access.is_empty() && now < st.expires_ms;
        // Kept whatever else the answer holds: the endpoint has retired the old one.
        if let Some(r) = rotated.filter(|r| !r.is_empty() && *r != st.refresh) {
            st.refresh = r;
            self.persist(&st.refresh);
        }
        let outcome = match answer {
            Ok(a) => {
                let lifetime = i64::try_from(a.expires_in.unwrap_or(900).saturating_mul(1000)).unwrap_or(i64::MAX);
                st.access = a.access_token;
                st.lifetime_ms = lifetime;
                st.expires_ms = now.saturating_add(lifetime);
                tracing::info!(bot, expires_in_s = lifetime / 1000, "access token renewed");
                Ok(st.access.clone())
            }
            // Refused early (inside the margin): only renewal is over, not sending. The broker takes the token in
            // hand until it expires, so exits and cancels in those minutes still go out; the bot stops then.
            Err(SessionError::Stopped(why)) if good => {
                tracing::error!(bot, error = %why, expires_in_s = (st.expires_ms - now) / 1000,
                    "the refresh token was refused: the current access token is used until it expires, then the bot \
                     stops");
                st.refused = Some(why);
                Ok(st.access.clone())
            }
            Err(e @ SessionError::Stopped(_)) => {
                tracing::error!(bot, error = %e, "the bot is stopped");
                st.stopped = Some(e.to_string());
                Err(e)
            }
            // The renewal is early (the margin) and the token in hand is still good: the broker takes it until it
            // expires, so an outage of the token endpoint inside the margin does not hold back orders (market
            // orders, exits, cancels) that would go out with it. Should it run out on the way, the broker's 401
            // forces a renewal and one resend.
            Err(e) if good => {
                tracing::warn!(bot, error = %e, expires_in_s = (st.expires_ms - now) / 1000,
                    "renewing the access token failed; the current one is used until it expires");
                st.renew_after_ms = now.saturating_add(RENEW_RETRY_MS);
                Ok(st.access.clone())
            }
            Err(e) => {
                tracing::warn!(bot, error = %e, "renewing the access token failed");
                Err(e)
            }
        };
        // Under the lock: every request waiting subscribed while this renewal ran, and hears of this one, not the next.
        st.renewing = false;
        self.renewed.send_replace(Some(outcome));
        unfinished.ended();
    }

    /// Ends a renewal that said nothing of what came of it: another may start, and the requests waiting for this
    /// one are told it gave no token (they would wait out their timeout).
    fn end_unanswered(&self, st: &mut TokenState) {
        st.renewing = false;
        let why = SessionError::Unavailable("the access token renewal ended without an answer".into());
        self.renewed.send_replace(Some(Err(why)));
    }

    fn persist(&self, refresh: &str) {
        let current = std::fs::read(&self.file).ok().and_then(|b| serde_json::from_slice::<Persisted>(&b).ok());
        let (configured, configured_at_ms) = current.map(|p| (p.configured, p.configured_at_ms)).unwrap_or_default();
        let p = Persisted { configured, refresh_token: refresh.to_owned(), configured_at_ms };
        if let Err(e) = write_private(&self.file, &p) {
            tracing::warn!(error = %e, "cannot keep the rotated refresh token; a restart uses the configured one");
        }
    }

    /// Asks the token endpoint for a new access token: the refresh token a 2xx answer hands back (read on its own,
    /// so that it is kept even when the rest of the answer cannot be used), and the answer.
    async fn refresh(&self, refresh: &str) -> (Option<String>, Result<TokenAnswer, SessionError>) {
        let mut headers = Vec::new();
        let with_client = self.client_auth == ClientAuth::Body;
        if self.client_auth == ClientAuth::Basic {
            let pair = format!("{}:{}", self.client_id, self.client_secret);
            let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
            headers.push(("Authorization".to_owned(), format!("Basic {encoded}")));
        }
        let (content_type, body) = match self.body {
            BodyFormat::Form => {
                let mut b = format!("grant_type=refresh_token&refresh_token={}", form_escape(refresh));
                if with_client {
                    if !self.client_id.is_empty() {
                        b.push_str(&format!("&client_id={}", form_escape(&self.client_id)));
                    }
                    b.push_str(&format!("&client_secret={}", form_escape(&self.client_secret)));
                }
                ("application/x-www-form-urlencoded", b)
            }
            BodyFormat::Json => {
                let mut v = serde_json::json!({ "grant_type": "refresh_token", "refresh_token": refresh });
                if with_client {
                    v["client_secret"] = self.client_secret.clone().into();
                    if !self.client_id.is_empty() {
                        v["client_id"] = self.client_id.clone().into();
                    }
                }
                ("application/json", v.to_string())
            }
        };
        headers.push(("Content-Type".to_owned(), content_type.to_owned()));
        if let Some(agent) = &self.user_agent {
            headers.push(("User-Agent".to_owned(), agent.clone()));
        }
        let answer = crate::client::call(&self.url, "POST", &headers, body.into_bytes(), self.timeout).await;
        let (status, bytes) = match answer {
            Ok(a) => a,
            Err(e) => return (None, Err(SessionError::Unavailable(format!("the token endpoint: {e}")))),
        };
        if (200..=299).contains(&status) {
            let rotated = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| Some(v.get("refresh_token")?.as_str()?.to_owned()));
            let answer = serde_json::from_slice::<TokenAnswer>(&bytes)
                .map_err(|e| SessionError::Unavailable(format!("the token endpoint's answer cannot be read: {e}")))
                .and_then(sendable);
            return (rotated, answer);
        }
        (None, refused(status, &bytes))
    }
}

/// A 2xx token answer whose access token can be sent: one that is empty, blank or not a header value (a newline in
/// it) went out as `Authorization: Bearer ` (the broker's 401, a renewal, the same answer) or failed every request
/// unsent. Such an answer is unreadable: tried again later, like any other the session cannot use.
fn sendable(a: TokenAnswer) -> Result<TokenAnswer, SessionError> {
    let token = a.access_token.as_str();
    if token.trim().is_empty() {
        return Err(SessionError::Unavailable("the token endpoint's answer holds an empty access_token".into()));
    }
    if token.trim() != token || hyper::header::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
        return Err(SessionError::Unavailable(
            "the token endpoint's answer holds an access_token that cannot be sent in a header".into(),
        ));
    }
    Ok(a)
}

/// A token endpoint's answer other than a 2xx, as an error.
fn refused(status: u16, bytes: &[u8]) -> Result<TokenAnswer, SessionError> {
    match status {
        // The token service's own refusal is OAuth's error object (RFC 6749 §5.2: `error` and a
        // description). A 4xx without one (an edge server's HTML "Access Denied" page, a gateway's refusal)
        // is not the refresh token's death: taken for it, it stopped the bot until a restart. Nor is one whose
        // code says the failure passes (`temporarily_unavailable`, `server_error`: RFC 6749 §4.1.2.1, which token
        // services answer on the token endpoint too, often with a 400; `slow_down`): an outage, tried again.
        400 | 401 | 403 if oauth_error(bytes) && !passing(bytes) => Err(SessionError::Stopped(format!(
            "the token endpoint refused the refresh token (HTTP {status}: {}): it has expired or been \
             revoked. Log in to the broker again, configure the new refresh token and restart the server; \
             until then the bot sends nothing",
            short(bytes)
        ))),
        _ => Err(SessionError::Unavailable(format!("the token endpoint answered HTTP {status}: {}", short(bytes)))),
    }
}

/// Whether a token endpoint's answer is an OAuth error: a JSON object with an `error` member (a code, or a
/// broker's own error object).
fn oauth_error(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").map(|e| e.is_string() || e.is_object()))
        .unwrap_or(false)
}

/// Whether an OAuth error's code (`error`, or a broker's error object's `code`) says the failure passes. Any other
/// code stops the session as before: the grant or the client is dead (`invalid_grant`, `invalid_client`,
/// `unauthorized_client`, …, or a broker's own word for an expired refresh token, such as `unsupported_token_type`),
/// or the request can never be taken as configured (`invalid_request`, `unsupported_grant_type`), and asking again
/// with the same refresh token cannot help.
fn passing(body: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else { return false };
    let code = match v.get("error") {
        Some(serde_json::Value::String(c)) => c.as_str(),
        Some(e @ serde_json::Value::Object(_)) => e.get("code").and_then(serde_json::Value::as_str).unwrap_or_default(),
        _ => "",
    };
    ["temporarily_unavailable", "server_error", "slow_down"].iter().any(|p| code.trim().eq_ignore_ascii_case(p))
}

/// An answer's first 200 characters for a message (a token endpoint's error never echoes a secret).
fn short(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.chars().take(200).collect::<String>().replace(['\r', '\n'], " ")
}

fn form_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Writes `value` as JSON to a file only its owner can read, replacing it atomically, and syncs the file and
/// the rename to the disk before it returns.
fn write_private(path: &Path, value: &Persisted) -> std::io::Result<()> {
    use std::io::Write as _;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt as _;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut f = options.open(&tmp)?;
    f.write_all(&serde_json::to_vec(value).unwrap_or_default())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    // The rename lives in the directory: until the directory is synced, a power loss can bring the old file back,
    // with a refresh token the provider has already rotated away (and refuses for good).
    #[cfg(unix)]
    {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

struct Jwt {
    key_name: String,
    key: EcdsaKeyPair,
    issuer: String,
    lifetime_s: u64,
    rng: ring::rand::SystemRandom,
}

impl Jwt {
    fn new(bot: &str, c: JwtConfig) -> Result<Jwt, String> {
        let key_name = c.key_name.resolve(&format!("bot {bot} auth key_name"))?;
        let pem = c.private_key.resolve(&format!("bot {bot} auth private_key"))?;
        // Keys are often kept in JSON or env with `\n` written out.
        let pem = pem.replace("\\n", "\n");
        let rng = ring::rand::SystemRandom::new();
        let key = ec_key(&pem, &rng).map_err(|e| format!("bot {bot} auth private_key: {e}"))?;
        Ok(Jwt { key_name, key, issuer: c.issuer, lifetime_s: c.lifetime_secs.max(1), rng })
    }

    fn token(&self, method: &str, authority: &str, path: &str) -> Result<String, SessionError> {
        let path = path.split('?').next().unwrap_or_default();
        let mut nonce = [0u8; 16];
        self.rng.fill(&mut nonce).map_err(|_| SessionError::Unavailable("no randomness for the JWT nonce".into()))?;
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let now = u64::try_from(now_ms() / 1000).unwrap_or(0);
        let header = serde_json::json!({ "alg": "ES256", "kid": self.key_name, "nonce": nonce, "typ": "JWT" });
        let claims = serde_json::json!({
            "sub": self.key_name, "iss": self.issuer, "nbf": now, "exp": now + self.lifetime_s,
            "uri": format!("{method} {authority}{path}"),
        });
        let signing_input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let sig = self
            .key
            .sign(&self.rng, signing_input.as_bytes())
            .map_err(|_| SessionError::Unavailable("signing the JWT failed".into()))?;
        Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref())))
    }
}

/// Reads a P-256 private key: PKCS#8 (`BEGIN PRIVATE KEY`) or SEC1 (`BEGIN EC PRIVATE KEY`, what the broker
/// hands out), the latter wrapped into PKCS#8 for ring.
fn ec_key(pem_text: &str, rng: &ring::rand::SystemRandom) -> Result<EcdsaKeyPair, String> {
    let block = pem::parse(pem_text.trim()).map_err(|e| format!("not a PEM key: {e}"))?;
    let der = match block.tag() {
        "PRIVATE KEY" => block.contents().to_vec(),
        "EC PRIVATE KEY" => sec1_to_pkcs8(block.contents()),
        other => return Err(format!("a PEM {other:?} is not an EC private key")),
    };
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, rng)
        .map_err(|e| format!("not a P-256 private key with its public key: {e}"))?;
    let _ = key.public_key();
    Ok(key)
}

/// PKCS#8 v1 around a SEC1 `ECPrivateKey` on P-256.
fn sec1_to_pkcs8(sec1: &[u8]) -> Vec<u8> {
    // AlgorithmIdentifier { id-ecPublicKey, prime256v1 }
    const ALG: [u8; 21] = [
        0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d,
        0x03, 0x01, 0x07,
    ];
    let mut inner = vec![0x02, 0x01, 0x00];
    inner.extend_from_slice(&ALG);
    inner.push(0x04);
    inner.extend(der_len(sec1.len()));
    inner.extend_from_slice(sec1);
    let mut out = vec![0x30];
    out.extend(der_len(inner.len()));
    out.extend(inner);
    out
}

fn der_len(n: usize) -> Vec<u8> {
    if n < 0x80 {
        vec![u8::try_from(n).unwrap_or(0)]
    } else if n < 0x100 {
        vec![0x81, u8::try_from(n).unwrap_or(0)]
    } else {
        vec![0x82, u8::try_from(n >> 8).unwrap_or(0), u8::try_from(n & 0xff).unwrap_or(0)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};

    /// An OAuth session whose access token `access` expires in `expires_in_ms` (of a 30-minute life, renewed five
    /// minutes early), renewed at `token_url`.
    fn oauth_at(token_url: &str, access: &str, expires_in_ms: i64) -> Session {
        let oauth = OAuth {
            url: crate::sync::Url::parse(token_url).unwrap(),
            client_id: String::new(),
            client_secret: "s".into(),
            client_auth: ClientAuth::Body,
            body: BodyFormat::Json,
            margin_ms: 300_000,
            timeout: Duration::from_secs(1),
            user_agent: None,
            // A directory of its own: a rotated token is written there, and its directory made the owner's alone
            // (the system's temporary directory itself, made so, locked every other user out of it).
            file: {
                static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::env::temp_dir().join(format!("swh-session-test-{}-{n}", std::process::id())).join("refresh.json")
            },
            state: tokio::sync::Mutex::new(TokenState {
                access: access.into(),
                expires_ms: now_ms() + expires_in_ms,
                lifetime_ms: 1_800_000,
                refresh: "r".into(),
                ..TokenState::default()
            }),
            renewed: tokio::sync::watch::Sender::new(None),
            refresh_lifetime_ms: None,
            configured_at_ms: std::sync::atomic::AtomicI64::new(0),
        };
        Session { bot: "b".into(), fixed: Vec::new(), scheme: Scheme::OAuth(std::sync::Arc::new(oauth)) }
    }

    /// Returns once the session's renewal in flight, if any, has ended (it runs in a task of its own).
    async fn renewal_ended(session: &Session) {
        let Scheme::OAuth(o) = &session.scheme else { unreachable!() };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while o.state.lock().await.renewing {
            assert!(std::time::Instant::now() < deadline, "the renewal did not end");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A token answer with an `expires_in` in a string (or anything else odd) failed whole, and the rotated refresh
    /// token in it was dropped: the endpoint had retired the old one, so the next renewal was refused and the bot
    /// stopped until the trader logged in again. Digits in a string are the lifetime; an answer that cannot be
    /// used at all (no access token) still keeps the rotated refresh token.
    #[tokio::test]
    async fn a_rotated_refresh_token_is_kept_whatever_else_the_answer_holds() {
        for (body, access, lifetime_ms) in [
            (
                r#"{"access_token":"T2","refresh_token":"r2","expires_in":"1800","token_type":"Bearer"}"#,
                Some("T2"),
                1_800_000,
            ),
            (r#"{"access_token":"T2","refresh_token":"r2","expires_in":1800.0}"#, Some("T2"), 1_800_000),
            (r#"{"access_token":"T2","refresh_token":"r2","expires_in":{"s":1}}"#, Some("T2"), 900_000),
            (r#"{"access_token":7,"refresh_token":"r2"}"#, None, 0),
        ] {
            let (url, asked) = slow_endpoint(Some(Duration::ZERO), "200 OK", body).await;
            let session = oauth_at(&url, "T0", -1_000);
            let got = session.headers("POST", "broker.example", "/v1/orders").await;
            renewal_ended(&session).await;
            assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1, "{body}");
            let Scheme::OAuth(o) = &session.scheme else { unreachable!() };
            let st = o.state.lock().await;
            assert_eq!(st.refresh, "r2", "the rotated refresh token was dropped: {body} ({got:?})");
            match access {
                Some(a) => {
                    assert_eq!((st.access.as_str(), st.lifetime_ms), (a, lifetime_ms), "{body}");
                    assert!(got.is_ok(), "{body}: {got:?}");
                }
                None => assert!(got.is_err(), "an answer with no access token is no token: {body} {got:?}"),
            }
            let kept: Persisted = serde_json::from_slice(&std::fs::read(&o.file).unwrap()).unwrap();
            assert_eq!(kept.refresh_token, "r2", "on disk too: {body}");
        }
    }

    /// A token endpoint that answers each request `status` (`200 OK`, `400 Bad Request`) with `body` `after` it
    /// came, or never when `after` is none; its URL, and how many requests came.
    async fn slow_endpoint(
        after: Option<Duration>,
        status: &'static str,
        body: &'static str,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/oauth/token", listener.local_addr().unwrap());
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = std::sync::Arc::clone(&asked);
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut c, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let _ = c.read(&mut buf).await;
                    let Some(after) = after else { return std::future::pending().await };
                    tokio::time::sleep(after).await;
                    let answer = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                         Connection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = c.write_all(answer.as_bytes()).await;
                });
            }
        });
        (url, asked)
    }

    /// The token endpoint hangs while the access token, inside its renewal margin, has four minutes left: each
    /// request goes out at once with it. The early renewal held the session's lock for as long as the endpoint
    /// took (up to the bot's timeout), and every request of the bot (market orders past their deadline) waited.
    #[tokio::test]
    async fn a_slow_early_renewal_holds_no_request_with_the_token_still_good() {
        let (url, asked) = slow_endpoint(None, "200 OK", "").await;
        let bearer = |t: &str| Ok(vec![("Authorization".to_owned(), format!("Bearer {t}"))]);
        let session = oauth_at(&url, "T1", 240_000);
        for _ in 0..3 {
            let got = tokio::time::timeout(
                Duration::from_millis(300),
                session.headers("POST", "broker.example", "/v1/orders"),
            )
            .await;
            assert_eq!(got, Ok(bearer("T1")), "held behind the renewal");
        }
        renewal_ended(&session).await;
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1, "one renewal at a time");
    }

    /// With no good token in hand, the requests wait for the one renewal in flight and all take its token.
    #[tokio::test]
    async fn requests_without_a_good_token_share_the_renewal_in_flight() {
        let (url, asked) =
            slow_endpoint(Some(Duration::from_millis(200)), "200 OK", r#"{"access_token":"T2","expires_in":1800}"#)
                .await;
        let bearer = |t: &str| Ok(vec![("Authorization".to_owned(), format!("Bearer {t}"))]);
        let session = oauth_at(&url, "T0", -1_000);
        let (a, b) = tokio::join!(
            session.headers("POST", "broker.example", "/v1/orders"),
            session.headers("DELETE", "broker.example", "/v1/orders/1")
        );
        assert_eq!((a, b), (bearer("T2"), bearer("T2")));
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1, "a renewal each");
    }

    /// The first renewal of the bot `renewal-panics-once` panics once the token endpoint has answered.
    pub(super) static PANIC_ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

    /// A renewal's task panicked (or was cut) with the session marked renewing: the mark stayed, no renewal was
    /// started again, and once the token had run out every request of the bot waited for one that never came,
    /// until its timeout, for good. The requests waiting are told at once, and the next one renews.
    #[tokio::test]
    async fn a_renewal_that_panicked_is_started_again() {
        let (url, asked) =
            slow_endpoint(Some(Duration::ZERO), "200 OK", r#"{"access_token":"T2","expires_in":1800}"#).await;
        let bearer = |t: &str| Ok(vec![("Authorization".to_owned(), format!("Bearer {t}"))]);
        let mut session = oauth_at(&url, "T0", -1_000);
        session.bot = "renewal-panics-once".into();
        // Within the session's own bound (its 1 s timeout and the slack), so that a waiter left to it fails here.
        let within = Duration::from_millis(900);
        let first = tokio::time::timeout(within, session.headers("POST", "broker.example", "/v1/orders")).await;
        assert!(matches!(first, Ok(Err(SessionError::Unavailable(_)))), "the waiter was not told: {first:?}");
        let again = tokio::time::timeout(within, session.headers("POST", "broker.example", "/v1/orders")).await;
        assert_eq!(again, Ok(bearer("T2")), "no renewal after the one that panicked");
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    /// The token endpoint is down (each connection closed at once) while the access token, inside its renewal
    /// margin, has four minutes left: the order goes out with it. The failed renewal threw the good token away,
    /// and every order (market orders and exits past their deadline, cancels past their tries) waited for the
    /// endpoint instead. The endpoint is not asked again on the next request (a hanging one would hold each for
    /// its timeout); once the token has run out, nothing is sent without a renewal.
    #[tokio::test]
    async fn a_failed_early_renewal_keeps_sending_with_the_token_still_good() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/oauth/token", listener.local_addr().unwrap());
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = std::sync::Arc::clone(&asked);
        tokio::spawn(async move {
            while let Ok((c, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(c);
            }
        });
        let bearer = |t: &str| Ok(vec![("Authorization".to_owned(), format!("Bearer {t}"))]);
        let session = oauth_at(&url, "T1", 240_000);
        assert_eq!(session.headers("POST", "broker.example", "/v1/orders").await, bearer("T1"));
        renewal_ended(&session).await;
        let once = asked.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(once, 1, "the renewal was tried");
        assert_eq!(session.headers("POST", "broker.example", "/v1/orders").await, bearer("T1"));
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1, "asked again at once");

        let expired = oauth_at(&url, "T0", -1_000);
        let got = expired.headers("POST", "broker.example", "/v1/orders").await;
        assert!(matches!(got, Err(SessionError::Unavailable(_))), "an expired token was used: {got:?}");
    }

    /// The token endpoint refuses the refresh token for good (its days are over, or a newer login retired it)
    /// while the access token, inside its renewal margin, has four minutes left: the order goes out with it, as
    /// the broker takes it until it expires. The refusal stopped the bot at once, and every exit and cancel of
    /// those minutes stayed home. The endpoint is not asked again; once the token has run out, the bot stops.
    #[tokio::test]
    async fn a_refused_early_renewal_keeps_sending_with_the_token_still_good_then_stops() {
        let refused = r#"{"error":"invalid_grant","error_description":"refresh token expired"}"#;
        let (url, asked) = slow_endpoint(Some(Duration::ZERO), "400 Bad Request", refused).await;
        let bearer = |t: &str| Ok(vec![("Authorization".to_owned(), format!("Bearer {t}"))]);
        let session = oauth_at(&url, "T1", 240_000);
        assert_eq!(session.headers("POST", "broker.example", "/v1/orders").await, bearer("T1"));
        renewal_ended(&session).await;
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1, "the renewal was tried");
        assert_eq!(session.stopped().await, None, "stopped with a good token in hand");
        assert_eq!(session.headers("DELETE", "broker.example", "/v1/orders/1").await, bearer("T1"));
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1, "a refused token asked again");
        // The token runs out: the bot stops, naming the refusal, and nothing is sent.
        let Scheme::OAuth(o) = &session.scheme else { unreachable!() };
        o.state.lock().await.expires_ms = now_ms() - 1;
        let got = session.headers("POST", "broker.example", "/v1/orders").await;
        assert!(matches!(&got, Err(SessionError::Stopped(why)) if why.contains("invalid_grant")), "{got:?}");
        assert!(session.stopped().await.is_some_and(|why| why.contains("invalid_grant")));
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A token endpoint that answers an OAuth error object whose code says the failure is passing
    /// (`temporarily_unavailable`, `server_error`, RFC 6749 §4.1.2.1, which many token services also answer on
    /// the token endpoint with a 400) stopped the bot for good, until a restart: every order and exit of the bot
    /// then failed, though the refresh token was alive. Such a refusal is an outage, tried again later.
    #[tokio::test]
    async fn a_passing_oauth_error_does_not_stop_the_bot() {
        for body in [
            r#"{"error":"temporarily_unavailable","error_description":"try again later"}"#,
            r#"{"error":"server_error","error_description":"internal error"}"#,
            r#"{"error":{"code":"slow_down","message":"too many requests"}}"#,
        ] {
            let (url, _asked) = slow_endpoint(Some(Duration::ZERO), "400 Bad Request", body).await;
            let session = oauth_at(&url, "T0", -1_000);
            let got = session.headers("POST", "broker.example", "/v1/orders").await;
            assert!(
                matches!(got, Err(SessionError::Unavailable(_))),
                "{body}: taken for a dead refresh token: {got:?}"
            );
            assert_eq!(session.stopped().await, None, "{body}: the bot was stopped until a restart");
        }
    }

    /// A 200 token answer whose `access_token` is empty, blank or holds a character no header may (a newline) was
    /// taken as the token: the bot's requests then went out with `Authorization: Bearer ` (the broker's 401, a
    /// renewal, the same answer) or failed unsent. Such an answer is unreadable, tried again later, and the rotated
    /// refresh token in it still kept.
    #[tokio::test]
    async fn an_access_token_that_cannot_be_sent_is_an_unreadable_answer() {
        for body in [
            r#"{"access_token":"","refresh_token":"r2","expires_in":1800}"#,
            r#"{"access_token":"   ","refresh_token":"r2","expires_in":1800}"#,
            r#"{"access_token":"T2\nX-Injected: 1","refresh_token":"r2","expires_in":1800}"#,
        ] {
            let (url, _asked) = slow_endpoint(Some(Duration::ZERO), "200 OK", body).await;
            let session = oauth_at(&url, "T0", -1_000);
            let got = session.headers("POST", "broker.example", "/v1/orders").await;
            renewal_ended(&session).await;
            assert!(matches!(got, Err(SessionError::Unavailable(_))), "{body}: used as the token: {got:?}");
            assert_eq!(session.stopped().await, None, "{body}");
            let Scheme::OAuth(o) = &session.scheme else { unreachable!() };
            assert_eq!(o.state.lock().await.refresh, "r2", "{body}: the rotated refresh token was dropped");
        }
    }

    fn test_key() -> (String, Vec<u8>) {
        let rng = ring::rand::SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let public = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, doc.as_ref(), &rng)
            .unwrap()
            .public_key()
            .as_ref()
            .to_vec();
        (pem::encode(&pem::Pem::new("PRIVATE KEY", doc.as_ref().to_vec())), public)
    }

    #[test]
    fn a_jwt_carries_the_claims_and_verifies_with_the_public_key() {
        let (pem_text, public) = test_key();
        let jwt = Jwt {
            key_name: "organizations/o/apiKeys/k".into(),
            key: ec_key(&pem_text, &ring::rand::SystemRandom::new()).unwrap(),
            issuer: "cdp".into(),
            lifetime_s: 120,
            rng: ring::rand::SystemRandom::new(),
        };
        let t = jwt.token("GET", "api.example:8443", "/api/v3/orders?x=1").unwrap();
        let parts: Vec<&str> = t.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        let claims: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["kid"], "organizations/o/apiKeys/k");
        assert_eq!(header["nonce"].as_str().unwrap().len(), 32);
        assert_eq!(claims["uri"], "GET api.example:8443/api/v3/orders");
        assert_eq!(claims["exp"].as_u64().unwrap() - claims["nbf"].as_u64().unwrap(), 120);
        let sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        let signed = format!("{}.{}", parts[0], parts[1]);
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &public).verify(signed.as_bytes(), &sig).unwrap();
        let other = jwt.token("GET", "api.example:8443", "/api/v3/orders").unwrap();
        assert_ne!(other.split('.').next(), Some(parts[0]), "a fresh nonce per request");
    }

    #[tokio::test]
    async fn a_401_to_an_older_token_keeps_the_one_minted_since() {
        let oauth = OAuth {
            url: crate::sync::Url::parse("https://broker.example/oauth/token").unwrap(),
            client_id: String::new(),
            client_secret: "s".into(),
            client_auth: ClientAuth::Body,
            body: BodyFormat::Json,
            margin_ms: 0,
            timeout: Duration::from_secs(1),
            user_agent: None,
            file: std::env::temp_dir().join("swh-session-test-unused").join("refresh.json"),
            state: tokio::sync::Mutex::new(TokenState {
                access: "T2".into(),
                expires_ms: now_ms() + 900_000,
                lifetime_ms: 900_000,
                refresh: "r".into(),
                stopped: None,
                refused: None,
                renew_after_ms: 0,
                renewing: false,
            }),
            renewed: tokio::sync::watch::Sender::new(None),
            refresh_lifetime_ms: None,
            configured_at_ms: std::sync::atomic::AtomicI64::new(0),
        };
        let session = Session { bot: "b".into(), fixed: Vec::new(), scheme: Scheme::OAuth(std::sync::Arc::new(oauth)) };
        let sent_with = |t: &str| vec![("Authorization".to_owned(), format!("Bearer {t}"))];
        async fn expires(s: &Session) -> i64 {
            let Scheme::OAuth(o) = &s.scheme else { unreachable!() };
            o.state.lock().await.expires_ms
        }
        // Another request's 401 already had T1 replaced by T2: this request's 401 (sent with T1) keeps T2.
        session.unauthorized(&sent_with("T1")).await;
        assert!(expires(&session).await > now_ms(), "a token minted after the failed request's was thrown away");
        // A 401 to T2 itself: the next request mints a new one.
        session.unauthorized(&sent_with("T2")).await;
        assert_eq!(expires(&session).await, 0);
    }

    /// A rotated token written over the one before is read back whole, in a directory made for it, with no
    /// temporary file left (the syncs themselves, against a power loss, cannot be observed from here).
    #[test]
    fn a_persisted_token_replaces_the_last_and_reads_back_whole() {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("swh-session-{}-{nanos}", std::process::id()));
        let path = dir.join("sessions").join("bot.json");
        for token in ["refresh-1", "refresh-2"] {
            let p = Persisted { configured: "h".into(), refresh_token: token.into(), configured_at_ms: Some(7) };
            write_private(&path, &p).unwrap();
        }
        let read: Persisted = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!((read.refresh_token.as_str(), read.configured_at_ms), ("refresh-2", Some(7)));
        assert!(!path.with_extension("tmp").exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_sec1_key_reads_like_its_pkcs8_form() {
        let (pem_text, public) = test_key();
        // ring's P-256 PKCS#8: SEQUENCE (3 bytes), version (3), AlgorithmIdentifier (21), then the SEC1
        // ECPrivateKey in an OCTET STRING (2 bytes of tag and length).
        let der = pem::parse(&pem_text).unwrap().contents().to_vec();
        assert_eq!(der[27], 0x04);
        let sec1 = der[29..].to_vec();
        assert_eq!(sec1[0], 0x30);
        let sec1_pem = pem::encode(&pem::Pem::new("EC PRIVATE KEY", sec1));
        let key = ec_key(&sec1_pem, &ring::rand::SystemRandom::new()).unwrap();
        assert_eq!(key.public_key().as_ref(), public.as_slice());
        assert!(ec_key(
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----",
            &ring::rand::SystemRandom::new()
        )
        .is_err());
    }
}
