//! `swh-admin`: the strategy-webhook server's admin API from the command line, for operators' scripts.
//!
//! ```sh
//! swh-admin strategies
//! swh-admin logs demo-equities --follow
//! swh-admin validate demo-equities alert.json
//! ```
//!
//! It talks plain HTTP to the admin listener (`--admin`, default `http://127.0.0.1:8444`) with the admin token
//! read from `--token-file` (default: the server's default data directory's `admin-token`) or `$SWH_ADMIN_TOKEN`.
//! Answers are printed as the API gives them (JSON), except the lists meant for reading (`strategies`, `logs`,
//! `outbox`). An error answer exits 1 with its message on standard error.

#[path = "../xdg.rs"]
mod xdg;

use bytes::Bytes;
use clap::{Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Command-line client of the strategy-webhook server's admin API: list strategies, tail logs, rotate a token,
/// validate a message, show a bot's state, see the outbox, retry or dismiss a failed delivery.
#[derive(Parser, Debug)]
#[command(version, propagate_version = true)]
struct Cli {
    /// The admin listener's base URL (plain HTTP, as the server prints it).
    #[arg(long, default_value = "http://127.0.0.1:8444", global = true)]
    admin: String,
    /// File holding the admin token (ignored when $SWH_ADMIN_TOKEN is set). Default: the server's default data
    /// directory's admin-token (~/.local/share/strategy-webhook/admin-token).
    #[arg(long, global = true)]
    token_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List the loaded strategies: id, status, bot count, name.
    Strategies,
    /// Print a strategy's newest log rows (oldest first), or keep printing new ones with --follow.
    Logs {
        /// The strategy's id.
        strategy: String,
        /// Rows to print (1 to 1000).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Lowest level: INFO, WARN or ERROR.
        #[arg(long)]
        level: Option<String>,
        /// Only this decision: processed, rejected, duplicate, inactive or error.
        #[arg(long)]
        decision: Option<String>,
        /// Only rows whose message or alerts hold this text.
        #[arg(long)]
        text: Option<String>,
        /// Keep polling every 2 s and print rows as they come (Ctrl-C to stop).
        #[arg(long, short)]
        follow: bool,
    },
    /// Give a strategy a new webhook token; the old URL stops working at once. Prints the new URL.
    Rotate {
        /// The strategy's id.
        strategy: String,
        /// Required: rotating breaks every sender still using the old URL.
        #[arg(long)]
        yes: bool,
    },
    /// Dry-run a message from a file (or - for standard input): decision, HTTP answer, broker requests, logs.
    /// Nothing is recorded, no order is sent.
    Validate {
        /// The strategy's id.
        strategy: String,
        /// The message file, as an alert sender would post it.
        file: PathBuf,
        /// The content type to send with the message. Default: none, so the server reads it as the webhook reads
        /// a sender's that declares none: a JSON object as JSON, anything else as a text alert (`buy AAPL`), as
        /// TradingView's application/json and text/plain are read. Give it to try what another sender declares.
        #[arg(long)]
        content_type: Option<String>,
    },
    /// Show a bot's positions and working orders as the server holds them.
    BotState {
        /// The strategy's id.
        strategy: String,
        /// The bot's id.
        bot: String,
    },
    /// List a strategy's outbox rows (newest first) with their state and broker answer.
    Outbox {
        /// The strategy's id.
        strategy: String,
        /// Rows to print (1 to 10000).
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Send a failed outbox row again; refused (exit 1) where a resend could double an order or undo a later
    /// alert's request.
    Retry {
        /// The strategy's id.
        strategy: String,
        /// The outbox row's id (see `outbox`).
        row: i64,
    },
    /// Set a failed outbox row aside once it is dealt with at the broker.
    Dismiss {
        /// The strategy's id.
        strategy: String,
        /// The outbox row's id (see `outbox`).
        row: i64,
    },
}

/// What went wrong, for standard error.
type Failure = String;

struct Client {
    host: String,
    port: u16,
    token: String,
}

impl Client {
    fn new(cli: &Cli) -> Result<Client, Failure> {
        let rest = cli.admin.strip_prefix("http://").ok_or_else(|| {
            format!("--admin {:?} must start with http:// (the admin listener is plain HTTP)", cli.admin)
        })?;
        let authority = rest.split('/').next().unwrap_or(rest);
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), p.parse().map_err(|_| format!("bad port in --admin {:?}", cli.admin))?),
            None => (authority.to_owned(), 80),
        };
        let token = match std::env::var("SWH_ADMIN_TOKEN") {
            Ok(t) if !t.trim().is_empty() => t.trim().to_owned(),
            _ => {
                let file = cli.token_file.clone().or_else(|| xdg::default_data_dir().map(|d| d.join("admin-token")));
                let file = file.ok_or("no --token-file, no $SWH_ADMIN_TOKEN, and no HOME to find the server's data directory by: pass --token-file DATA_DIR/admin-token")?;
                std::fs::read_to_string(&file)
                    .map_err(|e| {
                        format!("cannot read the admin token from {}: {e} (see --token-file)", file.display())
                    })?
                    .trim()
                    .to_owned()
            }
        };
        Ok(Client { host, port, token })
    }

    /// One request; the answer's JSON, or the API's error message.
    async fn call(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Result<Value, Failure> {
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("cannot reach the admin listener at {}:{}: {e}", self.host, self.port))?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .map_err(|e| format!("admin listener: {e}"))?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", format!("{}:{}", self.host, self.port))
            .header("authorization", format!("Bearer {}", self.token));
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let req = req.body(Full::new(Bytes::from(body))).map_err(|e| e.to_string())?;
        let res = send.send_request(req).await.map_err(|e| format!("admin listener: {e}"))?;
        let status = res.status().as_u16();
        let bytes = res.into_body().collect().await.map_err(|e| format!("admin listener: {e}"))?.to_bytes();
        let value: Value =
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        if status >= 400 {
            let mut message =
                value.get("error").and_then(Value::as_str).map_or_else(|| value.to_string(), str::to_owned);
            // A rotation the database did not confirm may still land, and then only its new URL answers.
            if let Some(url) = value.get("webhook_url").and_then(Value::as_str) {
                message.push_str(&format!("\n  webhook_url {url}"));
            }
            return Err(format!("HTTP {status}: {message}"));
        }
        Ok(value)
    }

    async fn get(&self, path: &str) -> Result<Value, Failure> {
        self.call(Method::GET, path, None, Vec::new()).await
    }
}

/// A path segment, percent-encoded.
fn seg(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A value as printed on the operator's terminal. Strings can carry what an alert's sender wrote (a placeholder
/// quoted in a log message): their control characters are printed escaped (`\u{1b}`), or a sender's terminal
/// escapes (cursor up, erase line) rewrote or hid the rows printed before.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) if s.chars().any(char::is_control) => {
            s.chars().map(|c| if c.is_control() { c.escape_unicode().to_string() } else { c.to_string() }).collect()
        }
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn print_log(r: &Value) {
    println!(
        "{}  {:<5}  {:<9}  {}  {}",
        text(&r["time"]),
        text(&r["level"]),
        text(&r["decision"]),
        text(&r["http_status"]),
        text(&r["message"])
    );
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let client = Client::new(&cli)?;
    match cli.command {
        Command::Strategies => {
            let v = client.get("/api/strategies").await?;
            for s in v["strategies"].as_array().into_iter().flatten() {
                println!(
                    "{}\t{}\t{} bot(s)\t{}",
                    text(&s["id"]),
                    text(&s["status"]),
                    text(&s["bots"]),
                    text(&s["name"])
                );
            }
        }
        Command::Logs { strategy, limit, level, decision, text: q, follow } => {
            let mut query = format!("limit={limit}");
            for (k, v) in [("level", level), ("decision", decision), ("q", q)] {
                if let Some(v) = v {
                    query.push_str(&format!("&{k}={}", seg(&v)));
                }
            }
            let path = format!("/api/strategies/{}/logs?{query}", seg(&strategy));
            let id = |r: &Value| r["id"].as_i64().unwrap_or(0);
            // Rows are read again down to the highest id printed `LATE` ago, and printed once each: on a shared
            // database a row's id is taken when it is written and seen when its transaction commits, so a row
            // can appear below one already printed (another server's batch, a commit waiting on a standby).
            // Following from the highest id printed alone, such a row (a delivery's ERROR) was never printed.
            const LATE: Duration = Duration::from_secs(10);
            let mut printed: std::collections::BTreeSet<i64> = std::collections::BTreeSet::new();
            let mut marks: std::collections::VecDeque<(tokio::time::Instant, i64)> = Default::default();
            let mut last = 0;
            // Below the first page nothing is followed: those rows were there before.
            let mut base = 0;
            let mut first = true;
            loop {
                let now = tokio::time::Instant::now();
                while marks.len() > 1 && marks[1].0 + LATE <= now {
                    marks.pop_front();
                }
                let floor = match marks.front() {
                    Some((at, max)) if *at + LATE <= now => (*max).max(base),
                    _ => base,
                };
                printed.retain(|i| *i > floor);
                // Newest first. Following, the pages before are read too (`before_id`) down to the floor: more
                // rows than a page between two polls (a burst of failed deliveries' ERROR rows) were never printed.
                let mut fresh: Vec<Value> = Vec::new();
                let mut page = path.clone();
                loop {
                    let v = client.get(&page).await?;
                    let rows: Vec<Value> = v["logs"].as_array().cloned().unwrap_or_default();
                    let full = rows.len() >= limit as usize;
                    let oldest = rows.last().map(id);
                    let reached = rows.iter().any(|r| id(r) <= floor);
                    fresh.extend(rows.into_iter().filter(|r| id(r) > floor && !printed.contains(&id(r))));
                    match oldest {
                        Some(oldest) if !first && full && !reached => page = format!("{path}&before_id={oldest}"),
                        _ => break,
                    }
                }
                fresh.sort_by_key(id);
                // A first page that was not full showed every row there was: one committing late below it is
                // followed too.
                if first && fresh.len() >= limit as usize {
                    base = fresh.first().map_or(0, |r| id(r) - 1);
                }
                for r in &fresh {
                    print_log(r);
                    printed.insert(id(r));
                    last = last.max(id(r));
                }
                marks.push_back((now, last));
                first = false;
                if !follow {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
        Command::Rotate { strategy, yes } => {
            if !yes {
                return Err(format!(
                    "rotating {strategy}'s token stops its current webhook URL at once; run again with --yes"
                ));
            }
            let v = client
                .call(Method::POST, &format!("/api/strategies/{}/rotate", seg(&strategy)), None, Vec::new())
                .await?;
            println!("{}", text(&v["webhook_url"]));
        }
        Command::Validate { strategy, file, content_type } => {
            let body = if file.as_os_str() == "-" {
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
                    .map_err(|e| format!("standard input: {e}"))?;
                b
            } else {
                std::fs::read(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?
            };
            let path = format!("/api/strategies/{}/validate", seg(&strategy));
            let v = client.call(Method::POST, &path, content_type.as_deref(), body).await?;
            println!(
                "decision: {}  (HTTP {}: {})",
                text(&v["decision"]),
                text(&v["http_status"]),
                text(&v["response"])
            );
            for o in v["orders"].as_array().into_iter().flatten() {
                let r = &o["request"];
                println!(
                    "order: {} ({}) {} {} {}",
                    text(&o["bot"]),
                    text(&o["broker"]),
                    text(&r["method"]),
                    text(&r["path"]),
                    text(&r["body"])
                );
            }
            for l in v["logs"].as_array().into_iter().flatten() {
                println!("log: {:<5} {}", text(&l["level"]), text(&l["message"]));
            }
        }
        Command::BotState { strategy, bot } => {
            let v = client.get(&format!("/api/strategies/{}/bots/{}/state", seg(&strategy), seg(&bot))).await?;
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        }
        Command::Outbox { strategy, limit } => {
            let v = client.get(&format!("/api/strategies/{}/outbox?limit={limit}", seg(&strategy))).await?;
            for r in v["outbox"].as_array().into_iter().flatten() {
                let retry = match r["retry"]["safe"].as_bool() {
                    Some(true) => "  [retry: safe]",
                    Some(false) => "  [retry: not safe]",
                    None => "",
                };
                println!(
                    "{}\t{}\t{}\t{} {} {}\t{}{retry}",
                    text(&r["id"]),
                    text(&r["status"]),
                    text(&r["bot"]),
                    text(&r["kind"]),
                    text(&r["method"]),
                    text(&r["path"]),
                    text(&r["result"])
                );
            }
        }
        Command::Retry { strategy, row } => outbox_action(&client, &strategy, row, "retry").await?,
        Command::Dismiss { strategy, row } => outbox_action(&client, &strategy, row, "dismiss").await?,
    }
    Ok(())
}

/// `retry` or `dismiss` on a failed outbox row.
async fn outbox_action(client: &Client, strategy: &str, row: i64, action: &str) -> Result<(), Failure> {
    let path = format!("/api/strategies/{}/outbox/{row}/{action}", seg(strategy));
    let v = client.call(Method::POST, &path, None, Vec::new()).await?;
    println!("row {} is {}", text(&v["id"]), text(&v["status"]));
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("swh-admin: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("swh-admin: {e}");
            ExitCode::FAILURE
        }
    }
}
