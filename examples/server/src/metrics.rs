//! Prometheus metrics, served at `GET /metrics` on the admin listener (`prometheus-client`, text format).
//!
//! The request path records through the plain functions here (one call at each place: [`alert`] and
//! [`decide`] and [`commit`] in `webhook.rs`, [`http_answer`] in `http.rs`, [`broker_call`] and [`delivery`] in
//! `dispatch.rs`), into one process-wide registry. What the database or the connection budget already knows
//! (outbox depth by state, open connections) is read when scraped, so it is never out of step.

use crate::budget::Budget;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use strategy_webhook::{Decision, Outcome};

type Labels = Vec<(&'static str, String)>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

struct Metrics {
    registry: Registry,
    alerts: Family<Labels, Counter>,
    http: Family<Labels, Counter>,
    decide: Histogram,
    commit: Histogram,
    store_queue: Histogram,
    store_transaction: Histogram,
    broker_requests: Family<Labels, Counter>,
    broker_seconds: Histograms,
    outbox: Family<Labels, Gauge>,
    connections: Gauge,
    in_flight: Gauge,
    state_age: Family<Labels, Gauge<f64, AtomicU64>>,
    /// The public listener's budget, whose counts are the open connections and requests in flight.
    budget: OnceLock<Arc<Budget>>,
    /// When each (strategy, bot)'s state was last synced from its broker (Unix ms).
    synced: Mutex<HashMap<(String, String), i64>>,
}

fn broker_histogram() -> Histogram {
    // 5 ms to about 20 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 12))
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let mut registry = Registry::with_prefix("swh");
        let m = Metrics {
            registry: Registry::default(),
            alerts: Family::default(),
            http: Family::default(),
            // 50 µs to about 1.6 s: a decision is microseconds, a group commit with fsync milliseconds.
            decide: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            commit: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            // 10 µs to about 0.3 s: what a commit's wait is made of, finer than the commit's own buckets.
            store_queue: Histogram::new(exponential_buckets(0.000_01, 2.0, 16)),
            store_transaction: Histogram::new(exponential_buckets(0.000_01, 2.0, 16)),
            broker_requests: Family::default(),
            broker_seconds: Family::new_with_constructor(broker_histogram),
            outbox: Family::default(),
            connections: Gauge::default(),
            in_flight: Gauge::default(),
            state_age: Family::default(),
            budget: OnceLock::new(),
            synced: Mutex::default(),
        };
        registry.register("alerts", "Alerts decided, by strategy and decision", m.alerts.clone());
        registry.register("http_responses", "Answers of the public (webhook) listener, by HTTP status", m.http.clone());
        registry.register("decide_seconds", "Time to parse and decide one alert", m.decide.clone());
        registry.register(
            "commit_seconds",
            "Time to commit a processed alert's outbox rows before answering",
            m.commit.clone(),
        );
        registry.register(
            "store_queue_seconds",
            "Time a write someone waits for (an alert's) spends queued before its transaction begins",
            m.store_queue.clone(),
        );
        registry.register(
            "store_transaction_seconds",
            "Time of one database transaction of the writer, from its first statement to the end of its commit \
             (the fsync included)",
            m.store_transaction.clone(),
        );
        registry.register(
            "broker_deliveries",
            "Outbox rows delivered, by the bot's broker and result (done or failed; paper bots included)",
            m.broker_requests.clone(),
        );
        registry.register(
            "broker_request_seconds",
            "Round trip of one HTTP request to a broker, by broker",
            m.broker_seconds.clone(),
        );
        registry.register("outbox_rows", "Outbox rows by strategy and state", m.outbox.clone());
        registry.register("connections_open", "Connections open on the webhook listener", m.connections.clone());
        registry.register("requests_in_flight", "Webhook requests being read or decided", m.in_flight.clone());
        registry.register(
            "bot_state_age_seconds",
            "Age of each bot's state as last synced from its broker",
            m.state_age.clone(),
        );
        Metrics { registry, ..m }
    })
}

/// A label value as Prometheus' text format writes it: prometheus-client writes values as given, and a strategy
/// or bot id holding `"`, `\` or a line break made the whole scrape unreadable (every dashboard and alert on
/// the server going silent).
fn label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Counts a decided alert under its strategy and decision (alerts that matched no strategy have no label
/// to go under: the HTTP answers count them).
pub fn alert(outcome: &Outcome) {
    let Some(strategy) = &outcome.strategy else { return };
    let decision = match outcome.decision {
        Decision::Processed => "processed",
        Decision::Rejected => "rejected",
        Decision::Duplicate => "duplicate",
        Decision::Inactive => "inactive",
        Decision::Error => "error",
    };
    metrics().alerts.get_or_create(&vec![("strategy", label(strategy)), ("decision", decision.into())]).inc();
}

/// Counts a webhook listener's answer by status.
pub fn http_answer(status: u16) {
    metrics().http.get_or_create(&vec![("status", status.to_string())]).inc();
}

/// Runs the decision of one alert, timing it.
pub fn decide<T>(f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    metrics().decide.observe(started.elapsed().as_secs_f64());
    out
}

/// Awaits the commit of a processed alert, timing it.
pub async fn commit<T>(f: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = f.await;
    metrics().commit.observe(started.elapsed().as_secs_f64());
    out
}

/// Notes one writer transaction that began at `began` and has just ended, and how long each write someone
/// waited for had been queued before it began (`queued`): with [`commit`], whether an alert's commit time is
/// the queue or the disk.
pub fn store_transaction(began: Instant, queued: impl Iterator<Item = Instant>) {
    let m = metrics();
    m.store_transaction.observe(began.elapsed().as_secs_f64());
    for q in queued {
        m.store_queue.observe(began.saturating_duration_since(q).as_secs_f64());
    }
}

/// Awaits one HTTP request to a broker, timing it under the broker's name.
pub async fn broker_call<T>(broker: &str, f: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = f.await;
    metrics().broker_seconds.get_or_create(&vec![("broker", label(broker))]).observe(started.elapsed().as_secs_f64());
    out
}

/// Counts what one outbox row's delivery came to.
pub fn delivery(broker: &str, ok: bool) {
    let result = if ok { "done" } else { "failed" };
    metrics().broker_requests.get_or_create(&vec![("broker", label(broker)), ("result", result.into())]).inc();
}

/// Gives the metrics the public listener's budget, whose counts are read when scraped.
pub fn watch_connections(budget: Arc<Budget>) {
    let _ = metrics().budget.set(budget);
}

/// Notes that a bot's state was synced from its broker at `at_ms` (for `swh_bot_state_age_seconds`).
pub fn bot_synced(strategy: &str, bot: &str, at_ms: i64) {
    let mut synced = metrics().synced.lock().unwrap_or_else(|e| e.into_inner());
    synced.insert((strategy.to_owned(), bot.to_owned()), at_ms);
}

/// The metrics in Prometheus' text format, with the gauges read now: `outbox` is (strategy, state, rows).
pub fn render(outbox: &[(String, String, i64)], now_ms: i64) -> String {
    let m = metrics();
    m.outbox.clear();
    for (strategy, state, n) in outbox {
        m.outbox.get_or_create(&vec![("strategy", label(strategy)), ("state", label(state))]).set(*n);
    }
    if let Some(b) = m.budget.get() {
        let (connections, in_flight) = b.in_use();
        m.connections.set(i64::from(connections));
        m.in_flight.set(i64::from(in_flight));
    }
    {
        let synced = m.synced.lock().unwrap_or_else(|e| e.into_inner());
        for ((strategy, bot), at) in synced.iter() {
            let age = (now_ms - at).max(0) as f64 / 1000.0;
            m.state_age.get_or_create(&vec![("strategy", label(strategy)), ("bot", label(bot))]).set(age);
        }
    }
    let mut out = String::new();
    if encode(&mut out, &m.registry).is_err() {
        tracing::error!("the metrics could not be encoded");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_gauges_reach_the_text() {
        http_answer(599);
        http_answer(599);
        delivery("unit-broker", false);
        bot_synced("unit-s", "unit-b", 1_000);
        let text = render(&[("unit-s".into(), "failed".into(), 3)], 11_000);
        assert!(text.contains("swh_http_responses_total{status=\"599\"} 2"), "{text}");
        assert!(text.contains("swh_broker_deliveries_total{broker=\"unit-broker\",result=\"failed\"} 1"), "{text}");
        assert!(text.contains("swh_outbox_rows{strategy=\"unit-s\",state=\"failed\"} 3"), "{text}");
        assert!(text.contains("swh_bot_state_age_seconds{strategy=\"unit-s\",bot=\"unit-b\"} 10.0"), "{text}");
        assert_eq!(decide(|| 7), 7);
        assert!(text.contains("# TYPE swh_decide_seconds histogram"), "{text}");
    }

    #[test]
    fn label_values_are_escaped_so_the_scrape_stays_readable() {
        // A strategy id is any non-empty text: written as given, `"` ended the label early and a line break
        // split the sample, and Prometheus refused the whole scrape.
        bot_synced("unit-\"quoted\"\\id", "unit-line\nbreak", 1_000);
        let text = render(&[("unit-a\"b".into(), "pending".into(), 2)], 2_000);
        assert!(text.contains(r#"swh_outbox_rows{strategy="unit-a\"b",state="pending"} 2"#), "{text}");
        assert!(
            text.contains(r#"swh_bot_state_age_seconds{strategy="unit-\"quoted\"\\id",bot="unit-line\nbreak"} 1.0"#),
            "{text}"
        );
        // Every sample line is one line, its labels closed before its value.
        for line in text.lines().filter(|l| !l.starts_with('#') && l.contains('{')) {
            assert!(line.rsplit_once("} ").is_some_and(|(_, v)| v.parse::<f64>().is_ok()), "{line}");
        }
    }

    #[test]
    fn a_transaction_and_its_queued_writes_reach_their_histograms() {
        let count = |text: &str, name: &str| -> u64 {
            let line =
                text.lines().find(|l| l.starts_with(&format!("{name}_count "))).unwrap_or_else(|| panic!("{text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        let before = render(&[], 0);
        let began = Instant::now();
        let queued = began - std::time::Duration::from_millis(3);
        store_transaction(began, [queued, queued].into_iter());
        let after = render(&[], 0);
        // Other tests of this process may commit meanwhile: at least this one's observations.
        assert!(count(&after, "swh_store_transaction_seconds") > count(&before, "swh_store_transaction_seconds"));
        assert!(count(&after, "swh_store_queue_seconds") >= count(&before, "swh_store_queue_seconds") + 2);
        // The 3 ms waits are not in the buckets under 2.56 ms.
        let bucket = |text: &str, le: &str| -> u64 {
            let key = format!("swh_store_queue_seconds_bucket{{le=\"{le}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(key.as_str()))
                .unwrap_or_else(|| panic!("{key} in {text}"))
                .parse()
                .unwrap()
        };
        let (under, all) =
            (bucket(&after, "0.00256") - bucket(&before, "0.00256"), bucket(&after, "+Inf") - bucket(&before, "+Inf"));
        assert!(all >= under + 2, "the two 3 ms waits counted under 2.56 ms: {under} of {all}");
    }
}
