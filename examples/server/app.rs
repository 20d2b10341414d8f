//! What the listeners share: the engine, the database handles, the rotated tokens, and the URLs to show.

use crate::store::{LogEntry, Reader, Writer};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};
use strategy_webhook::{Engine, EngineError, Outcome, Strategy, TokenHash};

/// The server's state.
pub struct App {
    /// The decision engine: strategies by token, rate and dedup windows.
    pub engine: Engine,
    /// Queues writes to the database.
    pub writer: Writer,
    /// Reads the database.
    pub reader: Reader,
    /// Tokens rotated through the admin API, by strategy id. They win over the snapshot files' `token_hash`,
    /// so that no secret is ever written back to a strategy file. The lock also orders a rotation against a
    /// reload of the same strategy, so that neither undoes the other.
    overrides: Mutex<HashMap<String, TokenHash>>,
    /// `https://host:port`, no trailing slash: the base of webhook URLs.
    pub public_url: String,
    /// The admin API's bearer token.
    pub admin_token: String,
}

impl App {
    /// A server state around an engine. `overrides` are the rotated tokens read from the database.
    pub fn new(
        engine: Engine,
        writer: Writer,
        reader: Reader,
        overrides: HashMap<String, TokenHash>,
        public_url: String,
        admin_token: String,
    ) -> App {
        App { engine, writer, reader, overrides: Mutex::new(overrides), public_url, admin_token }
    }

    /// Loads a snapshot into the engine, with the strategy's rotated token if it has one. Returns its id.
    pub fn apply_snapshot(&self, bytes: &[u8]) -> Result<String, EngineError> {
        let mut s = Strategy::from_json(bytes)?;
        let id = s.id.clone();
        let overrides = self.overrides.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = overrides.get(&id) {
            s.token_hash = t.clone();
        }
        self.engine.upsert(s)?;
        Ok(id)
    }

    /// Gives a strategy a new random token, committed to the database before it takes effect, and returns
    /// it. The old token answers 404 from the moment this returns, and after a restart too.
    pub async fn rotate(&self, id: &str) -> Result<TokenHash, RotateError> {
        if self.engine.strategy(id).is_none() {
            return Err(RotateError::Unknown);
        }
        let token = random_token().map_err(RotateError::Failed)?;
        // Durable first: a token that answered once must survive a crash.
        self.writer.set_token(id, token.as_str(), now_ms()).await.map_err(RotateError::Failed)?;
        let mut overrides = self.overrides.lock().unwrap_or_else(|e| e.into_inner());
        self.engine.rotate(id, token.clone()).map_err(|e| match e {
            EngineError::UnknownStrategy(_) => RotateError::Unknown,
            other => RotateError::Failed(other.to_string()),
        })?;
        overrides.insert(id.to_owned(), token.clone());
        Ok(token)
    }

    /// Queues an Outcome's log rows (if it has any) for the database.
    pub async fn record(&self, outcome: Outcome, ts_ms: i64) {
        if let Some(entry) = LogEntry::from_outcome(outcome, ts_ms) {
            self.writer.log(entry).await;
        }
    }

    /// The webhook URL for a token.
    pub fn webhook_url(&self, token: &TokenHash) -> String {
        format!("{}/webhooks/{}", self.public_url, token.as_str())
    }
}

/// Why a rotation failed.
#[derive(Debug)]
pub enum RotateError {
    /// No strategy has that id.
    Unknown,
    /// The token could not be made or stored.
    Failed(String),
}

/// A fresh token: 32 bytes from the operating system's generator, as 64 lowercase hex characters.
pub fn random_token() -> Result<TokenHash, String> {
    let hex = random_hex()?;
    TokenHash::parse(hex.as_bytes()).ok_or_else(|| "generated token has the wrong shape".to_owned())
}

/// 32 random bytes as 64 lowercase hex characters.
pub fn random_hex() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| format!("no randomness available: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Now, in Unix milliseconds: the core takes time as an argument.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
