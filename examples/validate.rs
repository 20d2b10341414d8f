//! Validate a sample message: parse a body and, with `--strategy`, run the full dry run
//! (decision, HTTP answer, orders in each bot's broker format, logs). Records nothing.
//!
//! ```text
//! cargo run --example validate -- [--strategy FILE] [--content-type TYPE] [--now MS] [--json] < BODY
//! ```
//! Exit status: 0 when the alert would be processed (or parses, without a strategy),
//! 1 when it would not, 2 on a usage or file error.

use std::io::Read;
use std::process::ExitCode;
use strategy_webhook::{alert, engine, Decision, Outcome, Strategy};

const USAGE: &str = "usage: validate [--strategy FILE] [--content-type TYPE] [--now UNIX_MS] [--json] < BODY

Reads an alert body on standard input and shows what the service makes of it.
  --strategy FILE       dry-run against this strategy snapshot (decision, orders, logs)
  --content-type TYPE   the request's Content-Type (default: none, so JSON objects are JSON, anything else text)
  --now UNIX_MS         the delivery time in Unix milliseconds (default: now)
  --json                machine-readable output";

struct Args {
    strategy: Option<String>,
    content_type: Option<String>,
    now: Option<i64>,
    json: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args { strategy: None, content_type: None, now: None, json: false };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--strategy" => a.strategy = Some(value("--strategy")?),
            "--content-type" => a.content_type = Some(value("--content-type")?),
            "--now" => {
                let v = value("--now")?;
                a.now = Some(v.parse().map_err(|_| format!("--now takes Unix milliseconds, not {v:?}"))?);
            }
            "--json" => a.json = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("validate: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut body = Vec::new();
    if let Err(e) = std::io::stdin().take(strategy_webhook::MAX_BODY as u64 + 1).read_to_end(&mut body) {
        eprintln!("validate: cannot read standard input: {e}");
        return ExitCode::from(2);
    }
    let ct = a.content_type.as_deref();
    let Some(path) = &a.strategy else {
        return parse_only(&body, ct, a.json);
    };
    let snapshot = match std::fs::read(path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("validate: cannot read {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let strategy = match Strategy::from_json(&snapshot) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("validate: {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let now = a.now.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
    });
    let outcome = engine::validate(&strategy, &body, ct, now);
    if a.json {
        println!("{}", outcome.to_json());
    } else {
        print_outcome(&outcome);
    }
    if outcome.decision == Decision::Processed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn parse_only(body: &[u8], ct: Option<&str>, json: bool) -> ExitCode {
    match alert::parse(body, ct) {
        Ok(alerts) => {
            if json {
                let list: Vec<serde_json::Value> =
                    alerts.iter().map(|a| serde_json::from_str(&a.to_json()).unwrap_or_default()).collect();
                println!("{}", serde_json::json!({ "ok": true, "alerts": list }));
            } else {
                println!("{} alert{}:", alerts.len(), if alerts.len() == 1 { "" } else { "s" });
                for a in &alerts {
                    println!("  {}", summary(a));
                }
                println!("\nAction words (buy, sell, entry, exit) are resolved by the strategy's rules: pass --strategy FILE for the full dry run.");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            if json {
                println!("{}", serde_json::json!({ "ok": false, "reason": e.to_string() }));
            } else {
                println!("This body cannot be used: {e}");
            }
            ExitCode::from(1)
        }
    }
}

fn summary(a: &strategy_webhook::Alert) -> String {
    let mut s = format!("{:<6} {:<5} {}", a.action.as_str(), a.direction.map_or("-", |d| d.as_str()), a.instrument);
    if let Some(p) = &a.price {
        s.push_str(&format!("  price {p}"));
    }
    if let Some(t) = a.order_type {
        s.push_str(&format!("  {}", t.as_str()));
    }
    if let Some(d) = a.duration {
        s.push_str(&format!("  {}", d.as_str()));
    }
    if let Some(q) = &a.quantity {
        s.push_str(&format!("  quantity {q}"));
    }
    if !a.legs.is_empty() {
        s.push_str(&format!("  {} legs", a.legs.len()));
    }
    if let Some(id) = &a.message_id {
        s.push_str(&format!("  message_id {id}"));
    }
    s
}

fn print_outcome(o: &Outcome) {
    println!("Decision:  {:?}", o.decision);
    println!("Answer:    HTTP {} {}", o.http_status, o.response);
    if let Some(r) = &o.reason {
        println!("Reason:    {r}");
    }
    if !o.alerts.is_empty() {
        println!("\nAlerts:");
        for a in &o.alerts {
            println!("  {}", summary(a));
        }
    }
    if !o.orders.is_empty() {
        println!("\nOrders (dry run, nothing sent):");
        for r in &o.orders {
            let req = &r.request;
            println!(
                "  {} via {} ({:?}): {} {}  [{}]",
                r.bot,
                r.broker,
                r.kind,
                req.method.as_str(),
                req.path,
                req.content_type.unwrap_or("no body")
            );
            let body = String::from_utf8_lossy(&req.body.to_bytes()).into_owned();
            if !body.is_empty() {
                println!("      {body}");
            }
            println!("      client_order_id {}", r.client_order_id);
        }
    }
    if !o.logs.is_empty() {
        println!("\nLogs:");
        for l in &o.logs {
            println!("  {:<5} {}", l.level.as_str(), l.message);
        }
    }
}
